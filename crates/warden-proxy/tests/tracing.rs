//! Distributed tracing end to end on a gateway: the trace context the app receives (W3C
//! `traceparent` for an `opentelemetry` provider, B3 for a `zipkin` one; the client's trace
//! id kept, this hop's span as the parent; `x-request-id` kept), and the spans a Python OTLP
//! gRPC receiver (`fixtures/tracing/otlp_receiver.py`, OpenTelemetry's published protos)
//! gets: Envoy's and Istio's tags, sampling at 100% and 1% within binomial bounds, a sampled
//! parent winning over 0%, and a stopped collector changing nothing for requests while its
//! spans are counted as dropped.

mod common;

use common::{addr, client, gateway, inline, recording_upstream, service_entry, Recording};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_testkit::{free_port, wait_until, KillOnDrop};

const COLLECTOR: &str = "otel-collector.observability.svc.cluster.local";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_ID: &str = "00f067aa0ba902b7";

/// The istio.io OpenTelemetry task's mesh config (`extensionProviders` + `defaultProviders`),
/// with the zipkin provider beside it and the sampling percentage set.
fn mesh(provider: &str, sampling: f64) -> String {
    format!(
        "defaultConfig:\n  tracing:\n    sampling: {sampling}\ndefaultProviders:\n  tracing: [{provider}]\n\
         extensionProviders:\n- name: otel-tracing\n  opentelemetry:\n    port: 4317\n    service: {COLLECTOR}\n\
         - name: zipkin\n  zipkin:\n    service: zipkin.istio-system.svc.cluster.local\n    port: 9411\n"
    )
}

/// A gateway in namespace istio-system (`app: istio-ingressgateway`) routing everything to
/// `upstream` as `echo.internal`, the collector's service at `collector`.
fn start(upstream: SocketAddr, collector: SocketAddr, mesh_text: &str) -> RunningProxy {
    start_with(upstream, collector, mesh_text, "")
}

/// [`start`] with more documents (Telemetry resources).
fn start_with(
    upstream: SocketAddr,
    collector: SocketAddr,
    mesh_text: &str,
    extra: &str,
) -> RunningProxy {
    let yaml = format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: app\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - route:\n    - destination: {{host: echo.internal}}\n{se}---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: otel-collector, namespace: observability}}\nspec:\n  hosts: [{COLLECTOR}]\n  resolution: STATIC\n  ports:\n  - {{number: 4317, name: grpc-otlp, protocol: GRPC}}\n  endpoints:\n  - address: {ip}\n    ports: {{grpc-otlp: {port}}}\n{extra}",
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[upstream]),
        ip = collector.ip(),
        port = collector.port(),
    );
    let (mesh, _) =
        warden_config::mesh_config::parse_mesh_config(Path::new("mesh.yaml"), mesh_text).unwrap();
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.namespace = "istio-system".into();
    opts.labels
        .insert("app".into(), "istio-ingressgateway".into());
    opts.tracing = warden_proxy::core::identity::TracingDefaults::of(&mesh);
    opts.extension_providers = Arc::new(mesh.extension_providers);
    Proxy::start(opts).expect("proxy starts")
}

/// GET / through the gateway with `headers`; the status.
async fn get(proxy: &RunningProxy, headers: &[(&str, &str)]) -> u16 {
    let mut req = client()
        .get(format!("http://{}/", addr(proxy, 0)))
        .header("host", "app.example.com");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status().as_u16()
}

/// The headers of the `n`th request the upstream received, names lowercased.
fn received(recording: &Recording, n: usize) -> Vec<(String, String)> {
    let r = recording.lock().unwrap();
    r.requests[n]
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    let mut found = headers.iter().filter(|(k, _)| k == name);
    let first = found.next().map(|(_, v)| v.as_str());
    assert!(found.next().is_none(), "one {name} header: {headers:?}");
    first
}

/// `00-<trace>-<span>-<flags>` split.
fn traceparent(value: &str) -> (String, String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00");
    assert_eq!((parts[1].len(), parts[2].len()), (32, 16), "{value}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w3c_context_reaches_the_app_with_this_hop_as_parent() {
    let (upstream, recording) = recording_upstream().await;
    let nowhere: SocketAddr = ([127, 0, 0, 1], free_port().unwrap()).into();
    let proxy = start(upstream, nowhere, &mesh("otel-tracing", 100.0));

    // A sampled caller: its trace id and tracestate kept, a new parent span, x-request-id kept.
    let sent = format!("00-{TRACE_ID}-{SPAN_ID}-01");
    let status = get(
        &proxy,
        &[
            ("traceparent", &sent),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("x-request-id", "req-1"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    let h = received(&recording, 0);
    let (trace, parent, flags) = traceparent(header(&h, "traceparent").unwrap());
    assert_eq!(trace, TRACE_ID);
    assert_ne!(parent, SPAN_ID, "this hop's span is the app's parent");
    assert_eq!(flags, "01");
    assert_eq!(header(&h, "tracestate"), Some("congo=t61rcWkgMzE"));
    assert_eq!(header(&h, "x-request-id"), Some("req-1"));
    assert!(
        header(&h, "x-b3-traceid").is_none(),
        "no B3 from an OpenTelemetry provider"
    );

    // An unsampled caller stays unsampled (its decision wins over 100%).
    get(
        &proxy,
        &[("traceparent", &format!("00-{TRACE_ID}-{SPAN_ID}-00"))],
    )
    .await;
    let (trace, _, flags) = traceparent(header(&received(&recording, 1), "traceparent").unwrap());
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE_ID, "00"));

    // No context (or an invalid one): a new trace each time, sampled at 100%, with an id.
    get(&proxy, &[]).await;
    get(&proxy, &[("traceparent", "00-xyz")]).await;
    let a = received(&recording, 2);
    let b = received(&recording, 3);
    let (ta, _, fa) = traceparent(header(&a, "traceparent").unwrap());
    let (tb, _, fb) = traceparent(header(&b, "traceparent").unwrap());
    assert_ne!(ta, tb);
    assert_ne!(ta, TRACE_ID);
    assert_eq!((fa.as_str(), fb.as_str()), ("01", "01"));
    assert_eq!(header(&a, "x-request-id").map(str::len), Some(36));

    // A request with a body goes through hyper's client and the header map: the same context.
    let resp = client()
        .post(format!("http://{}/upload", addr(&proxy, 0)))
        .header("host", "app.example.com")
        .header("traceparent", &sent)
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let h = received(&recording, 4);
    let (trace, parent, flags) = traceparent(header(&h, "traceparent").unwrap());
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE_ID, "01"));
    assert_ne!(parent, SPAN_ID);
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_headers_reach_the_app_from_a_zipkin_provider() {
    let (upstream, recording) = recording_upstream().await;
    let nowhere: SocketAddr = ([127, 0, 0, 1], free_port().unwrap()).into();
    let proxy = start(upstream, nowhere, &mesh("zipkin", 0.0));

    // Multi-header B3 from the client: trace kept, its span the parent, decision kept.
    get(
        &proxy,
        &[
            ("x-b3-traceid", TRACE_ID),
            ("x-b3-spanid", SPAN_ID),
            ("x-b3-sampled", "1"),
            ("x-request-id", "req-b3"),
        ],
    )
    .await;
    let h = received(&recording, 0);
    assert_eq!(header(&h, "x-b3-traceid"), Some(TRACE_ID));
    assert_eq!(header(&h, "x-b3-parentspanid"), Some(SPAN_ID));
    let span = header(&h, "x-b3-spanid").unwrap();
    assert!(span.len() == 16 && span != SPAN_ID, "{span}");
    assert_eq!(header(&h, "x-b3-sampled"), Some("1"));
    assert_eq!(header(&h, "x-request-id"), Some("req-b3"));
    assert!(
        header(&h, "traceparent").is_none(),
        "no W3C from a Zipkin provider"
    );

    // The single `b3` header is read and sent on as the multi-header form.
    get(&proxy, &[("b3", &format!("{TRACE_ID}-{SPAN_ID}-1"))]).await;
    let h = received(&recording, 1);
    assert!(header(&h, "b3").is_none());
    assert_eq!(header(&h, "x-b3-traceid"), Some(TRACE_ID));
    assert_eq!(header(&h, "x-b3-parentspanid"), Some(SPAN_ID));
    assert_eq!(header(&h, "x-b3-sampled"), Some("1"));

    // A new trace at 0%: ids and an unsampled decision, no parent.
    get(&proxy, &[]).await;
    let h = received(&recording, 2);
    assert_eq!(header(&h, "x-b3-traceid").map(str::len), Some(32));
    assert_eq!(header(&h, "x-b3-sampled"), Some("0"));
    assert!(header(&h, "x-b3-parentspanid").is_none());
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tracing_provider_headers_pass_untouched() {
    let (upstream, recording) = recording_upstream().await;
    let nowhere: SocketAddr = ([127, 0, 0, 1], free_port().unwrap()).into();
    let no_default = "extensionProviders:\n- name: otel-tracing\n  opentelemetry:\n    port: 4317\n    service: otel-collector.observability.svc.cluster.local\n";
    let proxy = start(upstream, nowhere, no_default);
    let sent = format!("00-{TRACE_ID}-{SPAN_ID}-01");
    get(&proxy, &[("traceparent", &sent)]).await;
    get(&proxy, &[]).await;
    assert_eq!(
        header(&received(&recording, 0), "traceparent"),
        Some(sent.as_str())
    );
    assert!(header(&received(&recording, 1), "traceparent").is_none());
    proxy.shutdown(Duration::from_secs(1));
}

/// `fixtures/tracing/otlp_receiver.py` on a free port, its spans logged as JSON lines.
struct Receiver {
    port: u16,
    log: PathBuf,
    _dir: warden_testkit::TempDir,
    process: Option<KillOnDrop>,
}

impl Receiver {
    fn start() -> Receiver {
        let dir = warden_testkit::TempDir::new("otlp").unwrap();
        let log = dir.path().join("spans.jsonl");
        std::fs::write(&log, "").unwrap();
        let port = free_port().unwrap();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tracing/otlp_receiver.py");
        let mut command = std::process::Command::new("python3");
        command.arg(script).arg(port.to_string()).arg(&log);
        let process = KillOnDrop::spawn(command).expect(
            "python3 runs (grpcio and the OpenTelemetry protos: python3 -m pip install grpcio xds-protos)",
        );
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "the OTLP receiver listens on {port}");
        Receiver {
            port,
            log,
            _dir: dir,
            process: Some(process),
        }
    }

    fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// Stop the receiver and start it again on the same port and log (its connections close).
    fn restart(&mut self) {
        self.stop();
        let refused = wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(self.addr()).is_err()
        });
        assert!(refused, "the receiver is gone");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tracing/otlp_receiver.py");
        let mut command = std::process::Command::new("python3");
        command
            .arg(script)
            .arg(self.port.to_string())
            .arg(&self.log);
        self.process = Some(KillOnDrop::spawn(command).expect("python3 runs"));
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(self.addr()).is_ok()
        });
        assert!(up, "the OTLP receiver listens again on {}", self.port);
    }

    fn spans(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Wait until `n` spans arrived (they leave the proxy in batches, at least every second).
    fn wait_for(&self, n: usize) -> Vec<serde_json::Value> {
        wait_until(Duration::from_secs(20), || self.spans().len() >= n);
        self.spans()
    }

    fn stop(&mut self) {
        self.process = None;
    }
}

/// A counter of the proxy's exposition (`warden_tracing_...`), 0 when absent.
fn counter(proxy: &RunningProxy, series: &str) -> u64 {
    proxy
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

const EXPORTED: &str = "warden_tracing_spans_exported_total ";
const FAILED: &str = "warden_tracing_spans_dropped_total{reason=\"export_failed\"} ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_with_istios_tags() {
    let receiver = Receiver::start();
    let (upstream, recording) = recording_upstream().await;
    let proxy = start(upstream, receiver.addr(), &mesh("otel-tracing", 100.0));
    let sent = format!("00-{TRACE_ID}-{SPAN_ID}-01");
    assert_eq!(
        get(
            &proxy,
            &[
                ("traceparent", &sent),
                ("x-request-id", "req-1"),
                ("user-agent", "tracing-test")
            ]
        )
        .await,
        200
    );
    assert_eq!(get(&proxy, &[]).await, 200);
    let spans = receiver.wait_for(2);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (_, app_parent, _) = traceparent(header(&received(&recording, 0), "traceparent").unwrap());
    let s = spans
        .iter()
        .find(|s| s["trace_id"] == TRACE_ID)
        .expect("the continued trace's span");
    assert_eq!(
        s["parent_span_id"], SPAN_ID,
        "the caller's span is the parent"
    );
    assert_eq!(
        s["span_id"],
        app_parent.as_str(),
        "the app's parent is this span"
    );
    assert_eq!(s["name"], "echo.internal:80/*", "Istio's route decorator");
    assert_eq!(
        s["kind"], 3,
        "SPAN_KIND_CLIENT: a gateway is an outbound listener"
    );
    assert_eq!(s["service"], "istio-ingressgateway.istio-system");
    assert!(s["end"].as_u64() >= s["start"].as_u64());
    for (k, v) in [
        ("component", "proxy"),
        ("guid:x-request-id", "req-1"),
        ("http.method", "GET"),
        ("http.url", "http://app.example.com/"),
        ("http.protocol", "HTTP/1.1"),
        ("http.status_code", "200"),
        ("user_agent", "tracing-test"),
        ("response_flags", "-"),
        ("response_size", "2"),
        ("upstream_cluster", "outbound|80||echo.internal"),
        ("istio.canonical_service", "istio-ingressgateway"),
        ("istio.canonical_revision", "latest"),
        ("istio.namespace", "istio-system"),
        ("istio.mesh_id", "cluster.local"),
        ("istio.cluster_id", "Kubernetes"),
        ("peer.address", "127.0.0.1"),
        ("upstream_address", &upstream.to_string()),
    ] {
        assert_eq!(s["attributes"][k], v, "{k} in {s}");
    }
    let root = spans.iter().find(|s| s["trace_id"] != TRACE_ID).unwrap();
    assert_eq!(
        root["parent_span_id"], "",
        "a new trace's span has no parent"
    );
    // The id made for a request without one is the one its span names and the app got.
    assert_eq!(
        root["attributes"]["guid:x-request-id"],
        header(&received(&recording, 1), "x-request-id").unwrap()
    );
    assert_eq!(counter(&proxy, EXPORTED), 2);
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_percentage_and_a_sampled_parent_wins() {
    let receiver = Receiver::start();
    let (upstream, _recording) = recording_upstream().await;

    // 100%: every request.
    let proxy = start(upstream, receiver.addr(), &mesh("otel-tracing", 100.0));
    for _ in 0..50 {
        assert_eq!(get(&proxy, &[]).await, 200);
    }
    assert_eq!(receiver.wait_for(50).len(), 50);
    proxy.shutdown(Duration::from_secs(1));

    // 1% of 2000 requests: binomial mean 20, sd 4.4; [5, 45] is beyond 3 sd either side.
    let proxy = start(upstream, receiver.addr(), &mesh("otel-tracing", 1.0));
    for _ in 0..2000 {
        assert_eq!(get(&proxy, &[]).await, 200);
    }
    // Callers that decided: 20 sampled ones are all traced, 20 unsampled ones never.
    let sampled = format!("00-{TRACE_ID}-{SPAN_ID}-01");
    let unsampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let unsampled = format!("00-{unsampled_trace}-{SPAN_ID}-00");
    for _ in 0..20 {
        assert_eq!(get(&proxy, &[("traceparent", &sampled)]).await, 200);
        assert_eq!(get(&proxy, &[("traceparent", &unsampled)]).await, 200);
    }
    // The exporter sends in queue order: once the parented spans (sent last) are in, so is
    // every earlier one.
    let settled = wait_until(Duration::from_secs(20), || {
        let spans = receiver.spans();
        let parented = spans.iter().filter(|s| s["trace_id"] == TRACE_ID).count();
        parented == 20 && spans.len() as u64 == 50 + counter(&proxy, EXPORTED)
    });
    assert!(settled, "exported {}", counter(&proxy, EXPORTED));
    let spans = receiver.spans();
    let at_one_percent = &spans[50..];
    let parented = at_one_percent
        .iter()
        .filter(|s| s["trace_id"] == TRACE_ID)
        .count();
    assert_eq!(parented, 20, "a sampled parent wins over 1%");
    assert!(!at_one_percent
        .iter()
        .any(|s| s["trace_id"] == unsampled_trace));
    let random = at_one_percent.len() - parented;
    assert!((5..=45).contains(&random), "{random} of 2000 sampled at 1%");
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_collector_leaves_requests_alone_and_drops_are_counted() {
    let mut receiver = Receiver::start();
    let (upstream, _recording) = recording_upstream().await;
    let proxy = start(upstream, receiver.addr(), &mesh("otel-tracing", 100.0));
    for _ in 0..5 {
        assert_eq!(get(&proxy, &[]).await, 200);
    }
    assert_eq!(receiver.wait_for(5).len(), 5);
    receiver.stop();
    let refused = wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(receiver.addr()).is_err()
    });
    assert!(refused, "the receiver is gone");
    for _ in 0..100 {
        assert_eq!(
            get(&proxy, &[]).await,
            200,
            "requests do not wait for spans"
        );
    }
    let counted = wait_until(Duration::from_secs(30), || counter(&proxy, FAILED) == 100);
    assert!(counted, "dropped: {}", counter(&proxy, FAILED));
    assert_eq!(counter(&proxy, EXPORTED), 5);
    // Envoy's `/stats` lists them too.
    let admin = proxy.admin_addr().unwrap();
    let stats = client()
        .get(format!("http://{admin}/stats"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        stats.contains("warden_tracing_spans_dropped_total{reason=\"export_failed\"}: 100"),
        "{stats}"
    );
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_collector_gets_the_next_batch() {
    let mut receiver = Receiver::start();
    let (upstream, _recording) = recording_upstream().await;
    let proxy = start(upstream, receiver.addr(), &mesh("otel-tracing", 100.0));
    for _ in 0..5 {
        assert_eq!(get(&proxy, &[]).await, 200);
    }
    assert_eq!(receiver.wait_for(5).len(), 5);
    // Between two exports the collector closes its connection: the next batch goes on a new
    // one (sent on the closed one, it was dropped as export_failed).
    receiver.restart();
    for _ in 0..5 {
        assert_eq!(get(&proxy, &[]).await, 200);
    }
    assert_eq!(receiver.wait_for(10).len(), 10);
    let exported = wait_until(Duration::from_secs(10), || counter(&proxy, EXPORTED) == 10);
    assert!(exported, "exported: {}", counter(&proxy, EXPORTED));
    assert_eq!(counter(&proxy, FAILED), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// Providers only: tracing comes from Telemetry resources.
const PROVIDERS_ONLY: &str = "defaultConfig:\n  tracing:\n    sampling: 100\nextensionProviders:\n- name: otel-tracing\n  opentelemetry:\n    port: 4317\n    service: otel-collector.observability.svc.cluster.local\n";

fn telemetry(name: &str, selector: &str, tracing: &str) -> String {
    format!(
        "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: {name}, namespace: istio-system}}\nspec:\n{selector}  tracing:\n{tracing}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_tracing_names_the_provider_sampling_tags_and_reporting() {
    let receiver = Receiver::start();
    let (upstream, recording) = recording_upstream().await;

    // The mesh-wide Telemetry names the provider and tags; the gateway's own overrides one tag
    // and adds one (Istio merges root, namespace and workload Telemetry field by field).
    let mesh_wide = telemetry(
        "mesh-default",
        "",
        "  - providers: [{name: otel-tracing}]\n    randomSamplingPercentage: 100\n    customTags:\n      team: {literal: {value: platform}}\n      user: {header: {name: x-user, defaultValue: anonymous}}\n      region: {environment: {name: WARDEN_TRACING_TEST_UNSET, defaultValue: eu-1}}\n",
    );
    let own = telemetry(
        "gateway",
        "  selector: {matchLabels: {app: istio-ingressgateway}}\n",
        "  - customTags:\n      team: {literal: {value: edge}}\n",
    );
    let proxy = start_with(
        upstream,
        receiver.addr(),
        PROVIDERS_ONLY,
        &format!("{mesh_wide}{own}"),
    );
    assert_eq!(get(&proxy, &[("x-user", "alice")]).await, 200);
    assert_eq!(get(&proxy, &[]).await, 200);
    let spans = receiver.wait_for(2);
    assert_eq!(spans.len(), 2);
    let users: Vec<&str> = spans
        .iter()
        .map(|s| s["attributes"]["user"].as_str().unwrap())
        .collect();
    assert!(
        users.contains(&"alice") && users.contains(&"anonymous"),
        "{users:?}"
    );
    for s in &spans {
        assert_eq!(s["attributes"]["team"], "edge", "{s}");
        assert_eq!(s["attributes"]["region"], "eu-1", "{s}");
    }
    proxy.shutdown(Duration::from_secs(1));

    // Telemetry's 0% wins over the mesh config's 100%.
    let zero = telemetry(
        "mesh-default",
        "",
        "  - providers: [{name: otel-tracing}]\n    randomSamplingPercentage: 0\n",
    );
    let proxy = start_with(upstream, receiver.addr(), PROVIDERS_ONLY, &zero);
    get(&proxy, &[]).await;
    let (_, _, flags) = traceparent(header(&received(&recording, 2), "traceparent").unwrap());
    assert_eq!(flags, "00");
    proxy.shutdown(Duration::from_secs(1));

    // disableSpanReporting: sampled and propagated, never sent.
    let quiet = telemetry(
        "mesh-default",
        "",
        "  - providers: [{name: otel-tracing}]\n    disableSpanReporting: true\n",
    );
    let proxy = start_with(upstream, receiver.addr(), PROVIDERS_ONLY, &quiet);
    get(&proxy, &[]).await;
    let (_, _, flags) = traceparent(header(&received(&recording, 3), "traceparent").unwrap());
    assert_eq!(flags, "01", "sampled at the mesh config's 100%");
    assert_eq!(counter(&proxy, EXPORTED), 0);
    assert_eq!(
        counter(
            &proxy,
            "warden_tracing_spans_dropped_total{reason=\"queue_full\"} "
        ),
        0
    );
    proxy.shutdown(Duration::from_secs(1));

    // Without Telemetry or defaultProviders nothing is traced.
    let proxy = start(upstream, receiver.addr(), PROVIDERS_ONLY);
    get(&proxy, &[]).await;
    assert!(header(&received(&recording, 4), "traceparent").is_none());
    proxy.shutdown(Duration::from_secs(1));
}
