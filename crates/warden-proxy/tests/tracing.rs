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
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_testkit::free_port;

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
    let yaml = format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: app\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - route:\n    - destination: {{host: echo.internal}}\n{se}---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: otel-collector, namespace: observability}}\nspec:\n  hosts: [{COLLECTOR}]\n  resolution: STATIC\n  ports:\n  - {{number: 4317, name: grpc-otlp, protocol: GRPC}}\n  endpoints:\n  - address: {ip}\n    ports: {{grpc-otlp: {port}}}\n",
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
