//! Istio's metrics as an operator of a mesh reads them: one real Prometheus (Debian's
//! `prometheus`, scraping every second) scrapes a gateway and two sidecar pods while a client
//! runs, and the PromQL of Istio's Grafana workload and service dashboards returns the series
//! and values the traffic made.
//!
//! The pods (network namespaces on a veth, `warden capture`, sidecars as uid 1337 over mTLS)
//! serve Istio's merged metrics on their status port (`:15020/stats/prometheus`). The gateway
//! (`istio-ingressgateway` in `istio-system`, its own mesh identity, ISTIO_MUTUAL to the
//! service by a DestinationRule) and Prometheus run in the client pod's namespace: the gateway
//! as uid 1337 (not captured, as a gateway has no sidecar), Prometheus as an unmeshed process
//! whose port 15020 is excluded from capture (Istio's `excludeOutboundPorts` annotation), so it
//! reaches its own pod's status port, the other pod's over the veth and the gateway's admin
//! port on loopback. The client calls through the gateway and, as the client pod's app,
//! through its sidecar (HTTP and TCP), counting what it sent; the server pod's app delays the
//! client app's calls by 300 ms; the gateway's local limit answers 429 on `/limited`. Checked:
//! the dashboards' request volume, requests by source and response code, P50/P90/P99 by source
//! (irate, while the client runs); exact raw counters on both reporters, 429s by
//! `response_flags="RL"`, the success rate and TCP bytes per service at the end; `promtool check
//! metrics` on the three expositions. Skips, saying why, where pods cannot be made or
//! prometheus, promtool or curl is missing.

mod common;

use common::pods::*;
use common::WARDEN;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use warden_testkit::{KillOnDrop, NetNs, RunAs, TempDir};

const GATEWAY_SA: &str = "istio-ingressgateway-service-account";
/// The gateway's ports in the client pod's namespace.
const GATEWAY_HTTP: u16 = 8000;
const GATEWAY_TCP: u16 = 9000;
const GATEWAY_ADMIN: &str = "127.0.0.1:15100";
const PROMETHEUS: &str = "127.0.0.1:9090";
/// Istio's merged-metrics port on each pod.
const STATUS_PORT: &str = "15020";
/// The client stops after this many rounds if the dashboards have not shown the traffic yet.
const MAX_ROUNDS: u64 = 200;
const GATEWAY_TCP_BYTES: usize = 2000;
const SIDECAR_TCP_BYTES: usize = 3000;
const SERVICE: &str = "echo.default.svc.cluster.local";
/// Calls to the gateway's limited path, and how many of them its local limit lets through.
const LIMITED_CALLS: u64 = 8;
const LIMITED_ALLOWED: u64 = 5;

/// Service `echo` on `api-1` and the client pod `client-1` (common::pods), and the gateway's
/// Deployment pod in `istio-system` (no address: the gateway runs in the client pod's
/// namespace here, whose address is client-1's).
fn registry() -> String {
    echo_api_and_client(&format!(
        r#"- apiVersion: v1
  kind: Pod
  metadata:
    name: istio-ingressgateway-5c8f7b9d4-q2xkz
    namespace: istio-system
    labels: {{app: istio-ingressgateway, istio: ingressgateway, pod-template-hash: 5c8f7b9d4}}
  spec: {{serviceAccountName: {GATEWAY_SA}, containers: [{{name: istio-proxy}}]}}
"#
    ))
}

/// The ingress gateway's HTTP and TCP servers routed to `echo`, over mTLS to its pod, and a
/// local limit of [`LIMITED_ALLOWED`] requests a day on `/limited`.
fn gateway_config() -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: ingress, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {GATEWAY_HTTP}, name: http, protocol: HTTP}}
    hosts: ["*"]
  - port: {{number: {GATEWAY_TCP}, name: tcp, protocol: TCP}}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: echo-ingress, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [istio-system/ingress]
  http:
  - route: [{{destination: {{host: {SERVICE}, port: {{number: 80}}}}}}]
  tcp:
  - match: [{{port: {GATEWAY_TCP}}}]
    route: [{{destination: {{host: {SERVICE}, port: {{number: 78}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: echo-mtls, namespace: default}}
spec:
  host: {SERVICE}
  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {{name: limited, namespace: istio-system}}
spec:
  targetRefs: [{{kind: Gateway, name: ingress, namespace: istio-system}}]
  local:
    rules:
    - clientSelectors: [{{path: {{type: PathPrefix, value: /limited}}}}]
      limit: {{requests: {LIMITED_ALLOWED}, unit: Day}}
"#
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

/// The ingress gateway in `ns` as uid 1337 with its own mesh identity, waited for.
fn start_gateway(ns: &NetNs, configs: &[&Path], identity: &Path) -> (KillOnDrop, RunAs) {
    let proxy = RunAs::new(PROXY_UID, PROXY_UID, WARDEN).expect("warden executable by uid 1337");
    let mut c = ns.command_as(&proxy);
    c.env("RUST_LOG", "warn")
        .args(["proxy", "--mode", "gateway"]);
    for config in configs {
        c.arg("-c").arg(config);
    }
    c.args(["--admin", GATEWAY_ADMIN, "--concurrency", "1", "--no-watch"])
        .args(["--namespace", "istio-system"])
        .args(["--label", "istio=ingressgateway"])
        .args(["--label", "app=istio-ingressgateway"])
        .args(["--service-account", GATEWAY_SA])
        .arg("--mesh-credentials")
        .arg(identity);
    let gateway = KillOnDrop::spawn(c).expect("spawn the gateway");
    let ready = ns.run_in(|| {
        warden_testkit::wait_until(Duration::from_secs(20), || {
            get(GATEWAY_ADMIN, "/ready", "127.0.0.1").is_ok_and(|r| r.status == 200)
        })
    });
    assert!(ready.unwrap(), "the gateway did not become ready");
    (gateway, proxy)
}

/// Prometheus in `ns`, scraping the gateway's admin port and both pods' status ports every
/// second, as Istio's `kubernetes-pods` job scrapes `:15020/stats/prometheus`.
struct Prometheus<'a> {
    ns: &'a NetNs,
    _server: KillOnDrop,
}

impl<'a> Prometheus<'a> {
    fn start(ns: &'a NetNs, dir: &TempDir) -> Prometheus<'a> {
        let config = dir
            .write(
                "prometheus.yml",
                &format!(
                    "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                     scrape_configs:\n\
                     - job_name: istio-ingressgateway\n  metrics_path: /stats/prometheus\n  \
                     static_configs: [{{targets: ['{GATEWAY_ADMIN}']}}]\n\
                     - job_name: kubernetes-pods\n  metrics_path: /stats/prometheus\n  \
                     static_configs:\n  \
                     - {{targets: ['{CLIENT_IP}:{STATUS_PORT}'], labels: {{pod: client-1}}}}\n  \
                     - {{targets: ['{SERVER_IP}:{STATUS_PORT}'], labels: {{pod: api-1}}}}\n"
                ),
            )
            .unwrap();
        let mut cmd = ns.command("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address={PROMETHEUS}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let server = KillOnDrop::spawn(cmd).expect("spawn prometheus");
        let p = Prometheus {
            ns,
            _server: server,
        };
        let ready = warden_testkit::wait_until(Duration::from_secs(30), || {
            let ready = p.get("/-/ready").is_some();
            if !ready {
                std::thread::sleep(Duration::from_millis(200));
            }
            ready
        });
        assert!(ready, "prometheus did not become ready");
        p
    }

    fn curl(&self, args: &[&str]) -> Option<String> {
        let out = self
            .ns
            .command("curl")
            .arg("-sf")
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn get(&self, path: &str) -> Option<String> {
        self.curl(&[&format!("http://{PROMETHEUS}{path}")])
    }

    /// An instant query's result: each series' labels and value (none when it fails).
    fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let text = self
            .curl(&[
                "--get",
                "--data-urlencode",
                &format!("query={promql}"),
                &format!("http://{PROMETHEUS}/api/v1/query"),
            ])
            .unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
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

    /// The result of `promql` once `ok` accepts it (scrapes come every second), else why not.
    fn until(
        &self,
        promql: &str,
        mut ok: impl FnMut(&[(Value, f64)]) -> bool,
    ) -> Result<Vec<(Value, f64)>, String> {
        let mut got = Vec::new();
        let seen = warden_testkit::wait_until(Duration::from_secs(60), || {
            got = self.query(promql);
            let done = ok(&got);
            if !done {
                // Each query starts curl in the namespace; scrapes come every second anyway.
                std::thread::sleep(Duration::from_millis(200));
            }
            done
        });
        if seen {
            Ok(got)
        } else {
            Err(format!("{promql}: got {got:?}"))
        }
    }

    /// Waits until `promql`'s rows, keyed by the values of the `by` labels joined with `,`,
    /// are exactly `want`; panics with what came otherwise.
    fn expect_rows(&self, promql: &str, by: &[&str], want: &[(&str, f64)]) {
        let mut want: Vec<(String, f64)> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let rows = |result: &[(Value, f64)]| {
            let mut rows: Vec<(String, f64)> = result
                .iter()
                .map(|(m, v)| {
                    let key: Vec<&str> = by.iter().map(|l| m[*l].as_str().unwrap_or("")).collect();
                    (key.join(","), *v)
                })
                .collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows
        };
        if let Err(e) = self.until(promql, |r| rows(r) == want) {
            panic!("want {want:?}\n{e}");
        }
    }

    /// Waits until `promql` is one series of value `want`.
    fn expect_value(&self, promql: &str, want: f64) {
        if let Err(e) = self.until(promql, |r| r.len() == 1 && r[0].1 == want) {
            panic!("want {want}\n{e}");
        }
    }
}

/// What the client sent, by path and answer.
#[derive(Default)]
struct Sent {
    gateway_ok: AtomicU64,
    gateway_errors: AtomicU64,
    sidecar_ok: AtomicU64,
    sidecar_errors: AtomicU64,
}

impl Sent {
    fn count(counter: &AtomicU64) -> f64 {
        counter.load(Ordering::Relaxed) as f64
    }
}

/// The client pod's traffic, round after round until `running` clears (at most
/// [`MAX_ROUNDS`]): through the gateway, and as the app through its sidecar with the server's
/// app delaying each answer 300 ms; every fourth round one 500 each way. Runs in the client
/// pod's namespace.
fn run_client(running: &AtomicBool, sent: &Sent) {
    let gateway = format!("127.0.0.1:{GATEWAY_HTTP}");
    let service = format!("{VIP}:80");
    for round in 0..MAX_ROUNDS {
        if !running.load(Ordering::Relaxed) {
            return;
        }
        let r = get(&gateway, "/", "echo.example.com").expect("a call through the gateway");
        assert_eq!(r.status, 200, "through the gateway: {}", r.body_text());
        sent.gateway_ok.fetch_add(1, Ordering::Relaxed);
        let r = get(&service, "/?delay=300ms", "echo.default:80").expect("a call to echo");
        assert_eq!(r.status, 200, "through the sidecar: {}", r.body_text());
        sent.sidecar_ok.fetch_add(1, Ordering::Relaxed);
        if round % 4 == 0 {
            let r = get(&gateway, "/?status=500", "echo.example.com").expect("via the gateway");
            assert_eq!(r.status, 500);
            sent.gateway_errors.fetch_add(1, Ordering::Relaxed);
            let r = get(&service, "/?status=500&delay=300ms", "echo.default:80")
                .expect("a call to echo");
            assert_eq!(r.status, 500);
            sent.sidecar_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The server workload as Istio's workload dashboard selects it.
const WORKLOAD: &str = r#"destination_workload_namespace=~"default",destination_workload=~"api-1""#;

/// The workload dashboard's panels (`reporter="destination"`, the default `$qrep` for
/// inbound), as written, with irate: they show the traffic only while it runs.
fn dashboards_while_traffic_runs(p: &Prometheus) -> Result<(), String> {
    // "Incoming Request Volume".
    p.until(
        &format!(
            r#"round(sum(irate(istio_requests_total{{reporter="destination",{WORKLOAD}}}[5m])), 0.001)"#
        ),
        |r| r.len() == 1 && r[0].1 > 0.0,
    )?;
    // "Incoming Requests By Source And Response Code" (mTLS): both sources, 200s flowing and
    // the 500s there.
    let by_source = format!(
        r#"round(sum(irate(istio_requests_total{{connection_security_policy="mutual_tls",{WORKLOAD},reporter=~"destination",source_workload=~".*",source_workload_namespace=~".*"}}[5m])) by (source_workload, source_workload_namespace, response_code), 0.001)"#
    );
    let row = |r: &[(Value, f64)], source: &str, ns: &str, code: &str| {
        r.iter()
            .find(|(m, _)| {
                m["source_workload"] == source
                    && m["source_workload_namespace"] == ns
                    && m["response_code"] == code
            })
            .map(|(_, v)| *v)
    };
    p.until(&by_source, |r| {
        [
            ("istio-ingressgateway", "istio-system"),
            ("client-1", "default"),
        ]
        .iter()
        .all(|&(source, ns)| {
            row(r, source, ns, "200").is_some_and(|v| v > 0.0)
                && row(r, source, ns, "500").is_some()
        })
    })?;
    // "Incoming Request Duration By Source" (mTLS): client-1's calls each waited 300 ms at
    // the app, so its P50, P90 and P99 are in Istio's (250, 500] ms bucket or above.
    for quantile in ["0.50", "0.90", "0.99"] {
        let q = format!(
            r#"(histogram_quantile({quantile}, sum(irate(istio_request_duration_milliseconds_bucket{{reporter="destination", connection_security_policy="mutual_tls", destination_workload=~"api-1", destination_workload_namespace=~"default", source_workload=~".*", source_workload_namespace=~".*"}}[1m])) by (source_workload, source_workload_namespace, le)) / 1000)"#
        );
        let client = |r: &[(Value, f64)]| {
            r.iter()
                .find(|(m, _)| m["source_workload"] == "client-1")
                .map(|(_, v)| *v)
                .filter(|v| v.is_finite())
        };
        let got = p.until(&q, |r| client(r).is_some())?;
        let seconds = client(&got).unwrap_or(f64::NAN);
        if seconds < 0.25 {
            return Err(format!(
                "{q}: client-1's P{quantile} is {seconds} s: {got:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn prometheus_scrapes_a_gateway_and_two_sidecar_pods() {
    for tool in ["prometheus", "promtool", "curl"] {
        if !have(tool) {
            eprintln!(
                "skipped: {tool} is needed (Debian's prometheus and curl; test.sh installs them)"
            );
            return;
        }
    }
    let Some((mut client, mut server, _outsider, dir)) = topology() else {
        return;
    };
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let server_id = dir.path().join("api-id");
    let client_id = dir.path().join("client-id");
    let gateway_id = dir.path().join("gateway-id");
    mesh_identity(&ca, &server_id, "api");
    mesh_identity(&ca, &client_id, "client");
    mesh_identity_in(&ca, &gateway_id, "istio-system", GATEWAY_SA);
    let mesh = dir.write("mesh.yaml", &registry()).unwrap();
    let ingress = dir.write("gateway.yaml", &gateway_config()).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    server.start_sidecar(
        &mesh,
        SERVER_IP,
        "app=api,version=v2",
        &[
            "--mesh-credentials",
            &s(&server_id),
            "--service-account",
            "api",
            "--status-port",
            STATUS_PORT,
        ],
    );
    // Prometheus shares this namespace unmeshed: its scrapes of the other pod's status port
    // are not captured.
    client.start_sidecar_capturing(
        &mesh,
        CLIENT_IP,
        "app=client",
        &["--exclude-outbound-ports", STATUS_PORT],
        &[
            "--mesh-credentials",
            &s(&client_id),
            "--service-account",
            "client",
            "--status-port",
            STATUS_PORT,
        ],
    );
    let _gateway = start_gateway(&client.ns, &[&mesh, &ingress], &gateway_id);
    let prometheus = Prometheus::start(&client.ns, &dir);
    prometheus.expect_value("count(up == 1)", 3.0);

    // TCP through the gateway and from the app through its sidecar, echoed back whole.
    for (at, len) in [
        (format!("127.0.0.1:{GATEWAY_TCP}"), GATEWAY_TCP_BYTES),
        (format!("{VIP}:78"), SIDECAR_TCP_BYTES),
    ] {
        let data = vec![b'x'; len];
        let back = client
            .ns
            .run_in(|| tcp_exchange(&at, &data))
            .unwrap()
            .unwrap();
        assert!(back == data, "{at}: {} bytes back", back.len());
    }

    // The gateway's local limit: the first calls reach echo, the rest are answered 429 (RL).
    let sent = Sent::default();
    let codes: Vec<u16> = client
        .ns
        .run_in(|| {
            (0..LIMITED_CALLS)
                .map(|_| {
                    get(
                        &format!("127.0.0.1:{GATEWAY_HTTP}"),
                        "/limited",
                        "echo.example.com",
                    )
                    .map_or(0, |r| r.status)
                })
                .collect()
        })
        .unwrap();
    let allowed = codes.iter().filter(|c| **c == 200).count() as u64;
    assert_eq!(allowed, LIMITED_ALLOWED, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| **c == 429).count() as u64,
        LIMITED_CALLS - LIMITED_ALLOWED,
        "{codes:?}"
    );
    sent.gateway_ok.fetch_add(allowed, Ordering::Relaxed);

    // HTTP while Prometheus scrapes; the dashboards are read while it runs, then it stops.
    let running = AtomicBool::new(true);
    let seen = std::thread::scope(|scope| {
        let traffic = scope.spawn(|| client.ns.run_in(|| run_client(&running, &sent)));
        let seen = dashboards_while_traffic_runs(&prometheus);
        running.store(false, Ordering::Relaxed);
        traffic
            .join()
            .expect("the client thread")
            .expect("the client's calls");
        seen
    });
    seen.unwrap_or_else(|e| panic!("{e}"));
    let gateway_ok = Sent::count(&sent.gateway_ok);
    let gateway_errors = Sent::count(&sent.gateway_errors);
    let sidecar_ok = Sent::count(&sent.sidecar_ok);
    let sidecar_errors = Sent::count(&sent.sidecar_errors);

    // Exact raw counters at the end instant, the panel's grouping without irate: the server
    // sidecar saw each call once, with the caller's identity from its certificate.
    prometheus.expect_rows(
        r#"sum(istio_requests_total{reporter="destination",destination_workload="api-1",destination_workload_namespace="default",connection_security_policy="mutual_tls"}) by (source_workload, source_workload_namespace, response_code)"#,
        &["source_workload", "source_workload_namespace", "response_code"],
        &[
            ("client-1,default,200", sidecar_ok),
            ("client-1,default,500", sidecar_errors),
            ("istio-ingressgateway,istio-system,200", gateway_ok),
            ("istio-ingressgateway,istio-system,500", gateway_errors),
        ],
    );
    // The calling side reports the same calls (the gateway also its 429s): the gateway and
    // the client's sidecar.
    prometheus.expect_rows(
        &format!(
            r#"sum(istio_requests_total{{reporter="source",destination_workload="api-1",destination_service="{SERVICE}"}}) by (source_workload, response_code)"#
        ),
        &["source_workload", "response_code"],
        &[
            ("client-1,200", sidecar_ok),
            ("client-1,500", sidecar_errors),
            ("istio-ingressgateway,200", gateway_ok),
            ("istio-ingressgateway,429", (LIMITED_CALLS - LIMITED_ALLOWED) as f64),
            ("istio-ingressgateway,500", gateway_errors),
        ],
    );
    // 429s by `response_flags="RL"`: the gateway's answers alone (none reached the server).
    prometheus.expect_rows(
        r#"sum(istio_requests_total{response_code="429",response_flags="RL"}) by (reporter, source_workload, destination_service)"#,
        &["reporter", "source_workload", "destination_service"],
        &[(
            &format!("source,istio-ingressgateway,{SERVICE}"),
            (LIMITED_CALLS - LIMITED_ALLOWED) as f64,
        )],
    );
    // "Incoming Success Rate (non-5xx responses)" over the raw counters.
    let ok = gateway_ok + sidecar_ok;
    let all = ok + gateway_errors + sidecar_errors;
    let q = format!(
        r#"sum(istio_requests_total{{reporter="destination",{WORKLOAD},response_code!~"5.*"}}) / sum(istio_requests_total{{reporter="destination",{WORKLOAD}}})"#
    );
    let got = prometheus.query(&q);
    assert!(
        got.len() == 1 && (got[0].1 - ok / all).abs() < 1e-9,
        "{q}: want {}, got {got:?}",
        ok / all
    );
    // Durations: none of client-1's calls at or under 250 ms, all of them counted.
    let client_calls =
        r#"reporter="destination",destination_workload="api-1",source_workload="client-1""#;
    prometheus.expect_value(
        &format!(
            r#"sum(istio_request_duration_milliseconds_bucket{{{client_calls},le=~"250|250\\.0"}})"#
        ),
        0.0,
    );
    prometheus.expect_value(
        &format!(r#"sum(istio_request_duration_milliseconds_count{{{client_calls}}})"#),
        sidecar_ok + sidecar_errors,
    );

    // TCP bytes per service and source, both ways, on both reporters; one connection each.
    let keys = [
        (format!("{SERVICE},client-1"), SIDECAR_TCP_BYTES as f64),
        (
            format!("{SERVICE},istio-ingressgateway"),
            GATEWAY_TCP_BYTES as f64,
        ),
    ];
    let bytes: Vec<(&str, f64)> = keys.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    for (reporter, mtls) in [
        ("destination", r#",connection_security_policy="mutual_tls""#),
        ("source", ""),
    ] {
        for metric in [
            "istio_tcp_received_bytes_total",
            "istio_tcp_sent_bytes_total",
        ] {
            prometheus.expect_rows(
                &format!(
                    r#"sum({metric}{{reporter="{reporter}",destination_service=~"{SERVICE}"{mtls}}}) by (destination_service, source_workload)"#
                ),
                &["destination_service", "source_workload"],
                &bytes,
            );
        }
        prometheus.expect_rows(
            &format!(
                r#"sum(istio_tcp_connections_closed_total{{reporter="{reporter}",destination_service="{SERVICE}"}}) by (source_workload)"#
            ),
            &["source_workload"],
            &[("client-1", 1.0), ("istio-ingressgateway", 1.0)],
        );
    }

    // promtool accepts each exposition Prometheus scraped.
    for (who, at) in [
        ("gateway", GATEWAY_ADMIN.to_string()),
        ("client sidecar", format!("{CLIENT_IP}:{STATUS_PORT}")),
        ("server sidecar", format!("{SERVER_IP}:{STATUS_PORT}")),
    ] {
        let text = client
            .ns
            .run_in(|| get(&at, "/stats/prometheus", "127.0.0.1"))
            .unwrap()
            .unwrap_or_else(|e| panic!("{who} at {at}: {e}"))
            .body_text();
        assert!(text.contains("istio_requests_total{"), "{who}: {text}");
        promtool_accepts(&text).unwrap_or_else(|e| panic!("{who}: {e}"));
    }
}
