//! One trace through a gateway and a sidecar pair over mTLS, as Istio's Envoys report it: the
//! gateway starts the trace (its span a client span), the app behind it passes the context on
//! (as Istio asks apps to) in its call to service `echo` from the client pod, whose sidecar's
//! span (client) is the gateway span's child, and the server pod's sidecar's span (server) is
//! the client sidecar span's child; all three share the trace id. Each proxy exports over
//! OTLP/gRPC to a Python receiver on its own loopback (`otlp_receiver.py`, grpcio).
//! Skips, saying why, where pods cannot be made.

mod common;

use common::pods::*;
use common::Warden;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_testkit::{free_port, spawn_listening, KillOnDrop};

const COLLECTOR: &str = "otel-collector.observability.svc.cluster.local";

/// Service `echo` on `api-1` and the client pod `client-1` (common::pods), and the collector
/// at each pod's own loopback.
fn registry(collector_port: u16) -> String {
    echo_api_and_client(&collector_entry(collector_port, ""))
}

/// The collector's ServiceEntry on 127.0.0.1 (each proxy's own loopback), as a List item or,
/// with `doc` = `---\n`, a document.
fn collector_entry(port: u16, doc: &str) -> String {
    let indent = if doc.is_empty() { "  " } else { "" };
    let item = if doc.is_empty() { "- " } else { "" };
    format!(
        "{doc}{item}apiVersion: networking.istio.io/v1\n{indent}kind: ServiceEntry\n{indent}metadata: {{name: otel-collector, namespace: observability}}\n{indent}spec:\n{indent}  hosts: [{COLLECTOR}]\n{indent}  location: MESH_EXTERNAL\n{indent}  resolution: STATIC\n{indent}  ports:\n{indent}  - {{number: 4317, name: grpc-otlp, protocol: GRPC}}\n{indent}  endpoints:\n{indent}  - address: 127.0.0.1\n{indent}    ports: {{grpc-otlp: {port}}}\n"
    )
}

/// The OpenTelemetry task's mesh config at 100% sampling.
const MESH: &str = "defaultConfig:\n  tracing:\n    sampling: 100\ndefaultProviders:\n  tracing: [otel-tracing]\nextensionProviders:\n- name: otel-tracing\n  opentelemetry:\n    port: 4317\n    service: otel-collector.observability.svc.cluster.local\n";

fn receiver_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../warden-proxy/tests/fixtures/tracing/otlp_receiver.py")
}

fn spans(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one span `log` receives.
fn one_span(log: &Path, who: &str) -> serde_json::Value {
    let arrived = warden_testkit::wait_until(Duration::from_secs(20), || !spans(log).is_empty());
    assert!(arrived, "{who}: no span arrived");
    let mut all = spans(log);
    assert_eq!(all.len(), 1, "{who}: {all:?}");
    all.remove(0)
}

/// The app behind the gateway: records the `traceparent` it got, answers 200.
fn app() -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut traceparent = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("traceparent") {
                        traceparent = v.trim().to_owned();
                    }
                }
            }
            let _ = tx.send(traceparent);
            let mut stream = stream;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (at, rx)
}

#[test]
fn gateway_and_both_sidecars_share_one_trace_with_correct_parents() {
    if std::process::Command::new("python3")
        .args([
            "-c",
            "import grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2",
        ])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("skipped: python3 with grpcio and the OpenTelemetry protos is needed (test.sh installs them)");
        return;
    }
    let Some((mut client, mut server, _outsider, dir)) = topology() else {
        return;
    };
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let (server_id, client_id) = (dir.path().join("api-id"), dir.path().join("client-id"));
    mesh_identity(&ca, &server_id, "api");
    mesh_identity(&ca, &client_id, "client");

    // One receiver per proxy, each on its own loopback, the same port.
    let port = free_port().unwrap();
    let logs: Vec<PathBuf> = ["gateway", "client", "server"]
        .iter()
        .map(|n| dir.write(&format!("{n}-spans.jsonl"), "").unwrap())
        .collect();
    let mut receivers = Vec::new();
    for (pod, log) in [(&client, &logs[1]), (&server, &logs[2])] {
        let mut c = pod.ns.command("python3");
        c.arg(receiver_script()).arg(port.to_string()).arg(log);
        receivers.push(spawn_listening(&pod.ns, c, &[port]));
    }
    let mut c = std::process::Command::new("python3");
    c.arg(receiver_script()).arg(port.to_string()).arg(&logs[0]);
    receivers.push(KillOnDrop::spawn(c).unwrap());
    assert!(
        wait_until(|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "the gateway's receiver listens"
    );

    let config = dir.write("mesh.yaml", &registry(port)).unwrap();
    let mesh = dir.write("meshconfig.yaml", MESH).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for (pod, ip, labels, id, sa) in [
        (
            &mut server,
            SERVER_IP,
            "app=api,version=v2",
            &server_id,
            "api",
        ),
        (&mut client, CLIENT_IP, "app=client", &client_id, "client"),
    ] {
        pod.start_sidecar(
            &config,
            ip,
            labels,
            &[
                "--mesh-credentials",
                &s(id),
                "--service-account",
                sa,
                "--mesh-config",
                &s(&mesh),
            ],
        );
    }

    // The gateway, its app on loopback.
    let (app_at, app_seen) = app();
    let extra = format!(
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: app}}\nspec:\n  hosts: [app.internal]\n  resolution: STATIC\n  ports:\n  - {{number: 80, name: http, protocol: HTTP}}\n  endpoints:\n  - address: 127.0.0.1\n    ports: {{http: {}}}\n{}",
        app_at.port(),
        collector_entry(port, "---\n")
    );
    let gateway = Warden::start(
        &extra,
        "  - route:\n    - destination: {host: app.internal}\n",
        &[
            "--mesh-config",
            &s(&mesh),
            "--namespace",
            "istio-system",
            "--label",
            "app=istio-ingressgateway",
        ],
    );
    let r = request_with(
        &gateway.listener.to_string(),
        "GET",
        "/",
        "shop.example.com",
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let traceparent = app_seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(!traceparent.is_empty(), "the app got a traceparent");

    // The app's call to echo, passing the context on.
    let r = client
        .ns
        .run_in(|| {
            request_with(
                &format!("{VIP}:80"),
                "GET",
                "/",
                "echo.default:80",
                &[("traceparent", &traceparent)],
                b"",
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200);

    let g = one_span(&logs[0], "gateway");
    let c = one_span(&logs[1], "client sidecar");
    let sv = one_span(&logs[2], "server sidecar");
    let trace = g["trace_id"].as_str().unwrap();
    assert_eq!(trace.len(), 32);
    assert_eq!(c["trace_id"], trace, "{c}");
    assert_eq!(sv["trace_id"], trace, "{sv}");
    assert_eq!(g["parent_span_id"], "", "the gateway starts the trace");
    assert_eq!(
        traceparent,
        format!("00-{trace}-{}-01", g["span_id"].as_str().unwrap()),
        "the app's parent is the gateway's span"
    );
    assert_eq!(
        c["parent_span_id"], g["span_id"],
        "client sidecar under the gateway"
    );
    assert_eq!(
        sv["parent_span_id"], c["span_id"],
        "server sidecar under the client sidecar"
    );
    // Kinds: CLIENT (3) for the gateway and the outbound side, SERVER (2) inbound.
    assert_eq!(
        (g["kind"].as_i64(), c["kind"].as_i64(), sv["kind"].as_i64()),
        (Some(3), Some(3), Some(2))
    );
    assert_eq!(g["service"], "istio-ingressgateway.istio-system");
    assert_eq!(c["service"], "client.default");
    assert_eq!(sv["service"], "api.default");
    assert_eq!(c["name"], "echo.default.svc.cluster.local:80/*");
    assert_eq!(sv["attributes"]["istio.canonical_revision"], "v2");
    assert_eq!(
        c["attributes"]["upstream_cluster"],
        "outbound|80||echo.default.svc.cluster.local"
    );
    assert_eq!(sv["attributes"]["http.status_code"], "200");
    drop(gateway);
}
