//! `warden proxy --mesh-config FILE`: timeouts and connection limits from Istio's MeshConfig
//! shape take effect, a flag given on the command line wins over the file, and a bad file
//! stops the start with an error naming file:line and field; `warden check --mesh-config` says
//! which `gatewayTopology` the proxy takes and from where.

mod common;

use common::{run_proxy_to_exit, write_config, Warden};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use warden_testkit::TempDir;

const DIRECT_200: &str = "  - directResponse: {status: 200, body: {string: ok}}\n";

/// A head that never completes: how long until warden answers it, and with what (within 6 s).
fn slow_head(w: &Warden) -> (String, Duration) {
    let started = Instant::now();
    let mut s = TcpStream::connect(w.listener).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    (out, started.elapsed())
}

#[test]
fn timeouts_come_from_the_mesh_config_and_flags_win() {
    let dir = TempDir::new("mesh-config").unwrap();
    let mesh = dir
        .write(
            "mesh.yaml",
            "# Istio MeshConfig\nenableTracing: false\nconnectTimeout: 2s\ndefaultConfig:\n  terminationDrainDuration: 1s\nwarden:\n  requestHeadersTimeout: 1s\n  streamIdleTimeout: 30s\n",
        )
        .unwrap();
    let mesh = mesh.to_str().unwrap();
    let w = Warden::start("", DIRECT_200, &["--mesh-config", mesh]);
    let (text, took) = slow_head(&w);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop(w);
    let w = Warden::start(
        "",
        DIRECT_200,
        &["--mesh-config", mesh, "--request-headers-timeout", "3s"],
    );
    let (text, took) = slow_head(&w);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        took >= Duration::from_secs(3),
        "the flag's 3s won: {took:?}"
    );
}

#[test]
fn a_bad_mesh_config_stops_the_start_naming_file_line_and_field() {
    let dir = TempDir::new("mesh-config").unwrap();
    let (config, _) = write_config(&dir, "", DIRECT_200);
    for (text, wants) in [
        (
            "warden:\n  idleTimeout: 1h\n  streamIdleTimeout: soon\n",
            &["mesh.yaml:3", "field warden.streamIdleTimeout", "soon"][..],
        ),
        (
            "defaultConfig:\n  concurrency: 2\n",
            &[
                "mesh.yaml:2",
                "field defaultConfig.concurrency",
                "not supported",
            ][..],
        ),
        (
            "warden:\n  maxConnections: many\n",
            &["mesh.yaml:2", "field warden.maxConnections"][..],
        ),
        (
            "defaultConfig:\n  gatewayTopology:\n    forwardClientCertDetails: SANITISE\n",
            &[
                "mesh.yaml:3",
                "field defaultConfig.gatewayTopology.forwardClientCertDetails",
                "SANITISE",
            ][..],
        ),
    ] {
        let mesh = dir.write("mesh.yaml", text).unwrap();
        let out = run_proxy_to_exit(&config, &["--mesh-config", mesh.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} was accepted");
        for want in wants {
            assert!(
                stderr.contains(want),
                "{text:?}: wanted {want:?} in {stderr}"
            );
        }
    }
}

/// `warden check` with `args`: (success, stdout + stderr).
fn check(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(common::WARDEN)
        .args(["check", "-c"])
        .arg(config)
        .args(args)
        .output()
        .expect("warden check runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn check_says_which_gateway_topology_it_took_and_from_where() {
    let dir = TempDir::new("mesh-config").unwrap();
    let (plain, _) = write_config(&dir, "", DIRECT_200);
    let (ok, text) = check(&plain, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("trusted proxies: 0 (default")
            && text.contains("x-forwarded-client-cert: SANITIZE_SET (By, Hash, Cert, Subject, URI, DNS of a client certificate) (Istio's gateway default)"),
        "{text}"
    );
    let mesh = dir
        .write(
            "mesh.yaml",
            "defaultConfig:\n  gatewayTopology:\n    numTrustedProxies: 2\n    forwardClientCertDetails: FORWARD_ONLY\n",
        )
        .unwrap();
    let mesh = mesh.to_str().unwrap();
    let (ok, text) = check(&plain, &["--mesh-config", mesh]);
    assert!(ok, "{text}");
    assert!(
        text.contains("trusted proxies: 2 (the mesh config's defaultConfig.gatewayTopology")
            && text.contains("x-forwarded-client-cert: FORWARD_ONLY (the mesh config's defaultConfig.gatewayTopology)"),
        "{text}"
    );
    // The gateway pod's annotation wins over the mesh config, field by field.
    let pod = "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: gw-1\n  namespace: istio-system\n  labels: {istio: ingressgateway}\n  annotations:\n    proxy.istio.io/config: 'gatewayTopology: {forwardClientCertDetails: APPEND_FORWARD}'\n";
    let (with_pod, _) = write_config(&dir, pod, DIRECT_200);
    let args = [
        "--mesh-config",
        mesh,
        "--namespace",
        "istio-system",
        "--label",
        "istio=ingressgateway",
    ];
    let (ok, text) = check(&with_pod, &args);
    assert!(ok, "{text}");
    assert!(
        text.contains("trusted proxies: 2 (the mesh config's")
            && text.contains("x-forwarded-client-cert: APPEND_FORWARD (By, Hash, Cert, Subject, URI, DNS of a client certificate) (gatewayTopology of Pod istio-system/gw-1's proxy.istio.io/config)"),
        "{text}"
    );
    // A sidecar: its inbound side's proxyHeaders, the pod's over the mesh config's.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: api-1\n  namespace: default\n  labels: {app: api}\n  annotations:\n    proxy.istio.io/config: '{proxyHeaders: {forwardedClientCert: SANITIZE_SET, setCurrentClientCertDetails: {dns: false}}}'\nstatus: {podIP: 10.0.0.5}\n";
    let sidecar = dir.write("sidecar.yaml", pod).unwrap();
    let headers = dir
        .write(
            "headers-mesh.yaml",
            "defaultConfig:\n  proxyHeaders:\n    forwardedClientCert: FORWARD_ONLY\n",
        )
        .unwrap();
    let headers = headers.to_str().unwrap();
    let sidecar_args = |label| {
        [
            "--mode",
            "sidecar",
            "--label",
            label,
            "--pod-ip",
            "10.0.0.5",
            "--mesh-config",
            headers,
        ]
    };
    let (ok, text) = check(&sidecar, &sidecar_args("app=api"));
    assert!(ok, "{text}");
    assert!(
        text.contains("x-forwarded-client-cert: inbound SANITIZE_SET (By, Hash, Subject, URI of a client certificate) (proxyHeaders of Pod default/api-1's proxy.istio.io/config), outbound SANITIZE"),
        "{text}"
    );
    let (ok, text) = check(&sidecar, &sidecar_args("app=other"));
    assert!(ok, "{text}");
    assert!(
        text.contains("x-forwarded-client-cert: inbound FORWARD_ONLY (the mesh config's defaultConfig.proxyHeaders)"),
        "{text}"
    );
    // A bad value in the mesh config fails the check, naming file:line and field.
    let bad = dir
        .write(
            "bad-mesh.yaml",
            "defaultConfig:\n  gatewayTopology:\n    forwardClientCertDetails: 3x\n",
        )
        .unwrap();
    let (ok, text) = check(&plain, &["--mesh-config", bad.to_str().unwrap()]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("bad-mesh.yaml:3")
            && text.contains("field defaultConfig.gatewayTopology.forwardClientCertDetails"),
        "{text}"
    );
}
