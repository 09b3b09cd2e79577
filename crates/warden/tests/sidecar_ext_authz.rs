//! istio.io's "External Authorization" task on a sidecar's inbound side, as a user runs it: two
//! pods (network namespaces) with capture and sidecars, the server pod being the task's httpbin
//! in `foo`; the task's `ext-authz` service (a Kubernetes Service, EndpointSlice and Pod, as
//! samples/extauthz/ext-authz.yaml makes them) runs in a third namespace: the Python gRPC and
//! HTTP providers of crates/warden-proxy's tests, following the sample's contract. The policy
//! and mesh config are the task's, unchanged. Skips, saying why, where pods cannot be made.

mod common;

use common::pods::*;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_testkit::KillOnDrop;

const DENY_BODY: &str =
    "denied by ext_authz for not found header `x-ext-authz: allow` in the request";

/// The task's policy, with the provider `provider`.
fn policy(provider: &str) -> String {
    format!(
        r#"apiVersion: security.istio.io/v1
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
    name: {provider}
  rules:
  - to:
    - operation:
        paths: ["/headers"]
"#
    )
}

const MESH: &str = r#"extensionProviders:
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

/// httpbin and ext-authz (Services, EndpointSlices, Pods) in `foo`, the sleep pod, and the
/// task's policy with `provider`.
fn cluster(provider: &str) -> String {
    let httpbin_and_sleep = httpbin_and_sleep();
    format!(
        r#"{httpbin_and_sleep}- apiVersion: v1
  kind: Service
  metadata: {{name: ext-authz, namespace: foo, labels: {{app: ext-authz}}}}
  spec:
    clusterIP: 10.96.0.20
    selector: {{app: ext-authz}}
    ports:
    - {{name: http, port: 8000, targetPort: 8000}}
    - {{name: grpc, port: 9000, targetPort: 9000}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: ext-authz-1
    namespace: foo
    labels: {{kubernetes.io/service-name: ext-authz}}
  addressType: IPv4
  endpoints:
  - addresses: [{OUTSIDER_IP}]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: ext-authz-1, namespace: foo}}
  ports: [{{name: http, port: 8000}}, {{name: grpc, port: 9000}}]
- apiVersion: v1
  kind: Pod
  metadata: {{name: ext-authz-1, namespace: foo, labels: {{app: ext-authz}}}}
  spec: {{containers: [{{name: ext-authz}}]}}
  status: {{podIP: {OUTSIDER_IP}}}
---
{}"#,
        policy(provider)
    )
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../warden-proxy/tests/fixtures/ext_authz")
        .join(name)
}

/// The status and body the sleep pod gets for `GET path` on httpbin's service.
fn call(client: &Pod, path: &str, ext_authz: Option<&str>) -> (u16, String) {
    let headers: Vec<(&str, &str)> = ext_authz.iter().map(|v| ("x-ext-authz", *v)).collect();
    let vip = format!("{VIP}:8000");
    let r = client
        .ns
        .run_in(|| request_with(&vip, "GET", path, "httpbin.foo:8000", &headers, b""))
        .unwrap()
        .unwrap();
    (r.status, r.body_text())
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn external_authorization_task_on_a_sidecar_pod_pair() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let grpc_log = dir.write("grpc.log", "").unwrap();
    let http_log = dir.write("http.log", "").unwrap();
    let mut providers = Vec::new();
    for (name, port, log) in [
        ("grpc_provider.py", 9000, &grpc_log),
        ("http_provider.py", 8000, &http_log),
    ] {
        let mut c = outsider.command("python3");
        c.arg(script(name))
            .arg(format!("{OUTSIDER_IP}:{port}"))
            .arg(log);
        providers.push(KillOnDrop::spawn(c).expect("python3 runs the provider"));
        let up = outsider
            .run_in(|| {
                warden_testkit::wait_until(Duration::from_secs(20), || {
                    std::net::TcpStream::connect((OUTSIDER_IP, port)).is_ok()
                })
            })
            .unwrap();
        assert!(up, "{name} listens on {OUTSIDER_IP}:{port}");
    }
    let config = dir
        .write("mesh.yaml", &cluster("sample-ext-authz-grpc"))
        .unwrap();
    let mesh = dir.write("meshconfig.yaml", MESH).unwrap();
    let mesh_arg = mesh.to_str().unwrap();
    // Both pods in the mesh (mTLS between them): the check names both workloads.
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let (server_id, client_id) = (dir.path().join("httpbin-id"), dir.path().join("sleep-id"));
    mesh_identity_in(&ca, &server_id, "foo", "httpbin");
    mesh_identity_in(&ca, &client_id, "foo", "sleep");
    let (server_id, client_id) = (server_id.to_str().unwrap(), client_id.to_str().unwrap());
    server.start_sidecar(
        &config,
        SERVER_IP,
        "app=httpbin",
        &[
            "--namespace",
            "foo",
            "--mesh-config",
            mesh_arg,
            "--mesh-credentials",
            server_id,
            "--service-account",
            "httpbin",
        ],
    );
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=sleep",
        &[
            "--namespace",
            "foo",
            "--mesh-config",
            mesh_arg,
            "--mesh-credentials",
            client_id,
            "--service-account",
            "sleep",
        ],
    );

    for (provider, log) in [
        ("sample-ext-authz-grpc", &grpc_log),
        ("sample-ext-authz-http", &http_log),
    ] {
        if provider != "sample-ext-authz-grpc" {
            std::fs::write(&config, cluster(provider)).unwrap();
            server.reload_sidecar();
        }
        assert_eq!(
            call(&client, "/headers", Some("deny")),
            (403, DENY_BODY.to_string()),
            "{provider}"
        );
        assert_eq!(
            call(&client, "/headers", Some("allow")).0,
            200,
            "{provider}"
        );
        assert_eq!(call(&client, "/ip", None).0, 200, "{provider}");
        assert_eq!(
            lines(log),
            2,
            "{provider}: /headers checked twice, /ip never"
        );
    }
    // The gRPC check's source and destination principals: the sleep and httpbin workloads.
    let checks = std::fs::read_to_string(&grpc_log).unwrap();
    for line in checks.lines() {
        assert_eq!(
            line,
            "/headers\tspiffe://cluster.local/ns/foo/sa/sleep\tspiffe://cluster.local/ns/foo/sa/httpbin"
        );
    }
}
