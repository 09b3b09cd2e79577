//! Istio's standard metrics from both sides of a sidecar pair over mTLS, as Istio reports
//! them: the client pod's sidecar with `reporter="source"`, the server pod's with
//! `reporter="destination"`, the peer's workload found from its SPIFFE identity in the
//! registry, `connection_security_policy="mutual_tls"` inbound; TCP bytes both ways on both
//! sides; `promtool check metrics` on each exposition. Skips, saying why, where pods cannot
//! be made or promtool is missing.

mod common;

use common::pods::*;
use std::path::Path;
use std::process::Command;

fn registry() -> String {
    echo_api_and_client("")
}

/// The sum of `name`'s samples whose labels include every one of `labels`.
fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn both_sidecars_report_istio_metrics_over_mtls() {
    if Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("skipped: promtool is needed (Debian's prometheus; test.sh installs it)");
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
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    server.start_sidecar(
        &config,
        SERVER_IP,
        "app=api,version=v2",
        &[
            "--mesh-credentials",
            &s(&server_id),
            "--service-account",
            "api",
        ],
    );
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &[
            "--mesh-credentials",
            &s(&client_id),
            "--service-account",
            "client",
        ],
    );

    const CALLS: usize = 10;
    for _ in 0..CALLS {
        let r = client
            .ns
            .run_in(|| get(&format!("{VIP}:80"), "/", "echo.default:80"))
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 200);
    }
    let data = vec![b'x'; 3000];
    let back = client
        .ns
        .run_in(|| tcp_exchange(&format!("{VIP}:78"), &data))
        .unwrap()
        .unwrap();
    assert!(back.starts_with(&data));

    let service = ("destination_service", "echo.default.svc.cluster.local");
    let peers = [
        ("source_workload", "client-1"),
        ("source_workload_namespace", "default"),
        ("source_app", "client"),
        ("destination_workload", "api-1"),
        ("destination_app", "api"),
        ("destination_version", "v2"),
        ("destination_canonical_revision", "v2"),
        (
            "destination_principal",
            "spiffe://cluster.local/ns/default/sa/api",
        ),
        service,
    ];
    // The client's side: reporter source.
    let mut want: Vec<(&str, &str)> = peers.to_vec();
    want.extend([
        ("reporter", "source"),
        ("response_code", "200"),
        ("request_protocol", "http"),
    ]);
    let text = client.admin_stats();
    assert_eq!(
        sum(&text, "istio_requests_total", &want),
        CALLS as f64,
        "{want:?}\n{text}"
    );
    promtool_accepts(&text).unwrap_or_else(|e| panic!("client sidecar: {e}"));
    // The server's side: reporter destination, the peer from its certificate.
    let mut want: Vec<(&str, &str)> = peers.to_vec();
    want.extend([
        ("reporter", "destination"),
        ("response_code", "200"),
        (
            "source_principal",
            "spiffe://cluster.local/ns/default/sa/client",
        ),
        ("connection_security_policy", "mutual_tls"),
    ]);
    let text = server.admin_stats();
    assert_eq!(
        sum(&text, "istio_requests_total", &want),
        CALLS as f64,
        "{want:?}\n{text}"
    );
    assert_eq!(
        sum(
            &text,
            "istio_request_duration_milliseconds_count",
            &[("reporter", "destination"), service]
        ),
        CALLS as f64
    );
    promtool_accepts(&text).unwrap_or_else(|e| panic!("server sidecar: {e}"));
    // TCP: 3000 bytes in and at least as many back, on both sides.
    for (pod, reporter) in [(&client, "source"), (&server, "destination")] {
        let labels = [("reporter", reporter), service, ("request_protocol", "tcp")];
        // Counted when the relay ends, which may be just after the client saw the EOF.
        let mut text = String::new();
        let closed = wait_until(|| {
            text = pod.admin_stats();
            sum(&text, "istio_tcp_connections_closed_total", &labels) == 1.0
        });
        assert!(closed, "{reporter}\n{text}");
        assert_eq!(
            sum(&text, "istio_tcp_received_bytes_total", &labels),
            3000.0,
            "{reporter}\n{text}"
        );
        assert!(sum(&text, "istio_tcp_sent_bytes_total", &labels) >= 3000.0);
        assert_eq!(
            sum(&text, "istio_tcp_connections_opened_total", &labels),
            1.0
        );
    }
}
