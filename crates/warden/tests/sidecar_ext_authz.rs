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
use warden_testkit::{KillOnDrop, NetNs, TempDir};

/// The sleep workload's SPIFFE id: the gRPC provider allows TCP connections from it.
const SLEEP_ID: &str = "spiffe://cluster.local/ns/foo/sa/sleep";

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
    cluster_with(provider, false, "")
}

/// [`cluster`], the ext-authz pod labelled as the injector labels a meshed pod when
/// `meshed`, and the documents `more` after the policy.
fn cluster_with(provider: &str, meshed: bool, more: &str) -> String {
    let httpbin_and_sleep = httpbin_and_sleep();
    let mesh_label = if meshed {
        ", security.istio.io/tlsMode: istio"
    } else {
        ""
    };
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
  metadata: {{name: ext-authz-1, namespace: foo, labels: {{app: ext-authz{mesh_label}}}}}
  spec: {{containers: [{{name: ext-authz}}]}}
  status: {{podIP: {OUTSIDER_IP}}}
---
{}{more}"#,
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

/// The pods, the providers (in the outsider namespace) and the two sidecars of the task, in
/// the mesh, with `config` (a file under the test's dir).
struct Task {
    client: Pod,
    server: Pod,
    outsider: NetNs,
    dir: TempDir,
    ca: PathBuf,
    mesh: PathBuf,
    grpc_log: PathBuf,
    http_log: PathBuf,
    _providers: Vec<KillOnDrop>,
}

impl Task {
    /// None (having said why) where pods cannot be made.
    fn start(config: &str) -> Option<(Task, PathBuf)> {
        let (client, server, outsider, dir) = topology()?;
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
                .arg(log)
                .args(["--allow-tcp", SLEEP_ID]);
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
        let config = dir.write("mesh.yaml", config).unwrap();
        let mesh = dir.write("meshconfig.yaml", MESH).unwrap();
        // Both pods in the mesh (mTLS between them): the check names both workloads.
        let ca = dir.path().join("ca");
        warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
        let mut task = Task {
            client,
            server,
            outsider,
            dir,
            ca,
            mesh,
            grpc_log,
            http_log,
            _providers: providers,
        };
        let (server, client) = (&mut task.server, &mut task.client);
        for (pod, ip, app) in [(server, SERVER_IP, "httpbin"), (client, CLIENT_IP, "sleep")] {
            let id = task.dir.path().join(format!("{app}-id"));
            mesh_identity_in(&task.ca, &id, "foo", app);
            pod.start_sidecar(
                &config,
                ip,
                &format!("app={app}"),
                &[
                    "--namespace",
                    "foo",
                    "--mesh-config",
                    task.mesh.to_str().unwrap(),
                    "--mesh-credentials",
                    id.to_str().unwrap(),
                    "--service-account",
                    app,
                ],
            );
        }
        Some((task, config))
    }
}

#[test]
fn external_authorization_task_on_a_sidecar_pod_pair() {
    let Some((task, config)) = Task::start(&cluster("sample-ext-authz-grpc")) else {
        return;
    };
    let (client, server) = (&task.client, &task.server);
    for (provider, log) in [
        ("sample-ext-authz-grpc", &task.grpc_log),
        ("sample-ext-authz-http", &task.http_log),
    ] {
        if provider != "sample-ext-authz-grpc" {
            std::fs::write(&config, cluster(provider)).unwrap();
            server.reload_sidecar();
        }
        assert_eq!(
            call(client, "/headers", Some("deny")),
            (403, DENY_BODY.to_string()),
            "{provider}"
        );
        assert_eq!(call(client, "/headers", Some("allow")).0, 200, "{provider}");
        assert_eq!(call(client, "/ip", None).0, 200, "{provider}");
        assert_eq!(
            lines(log),
            2,
            "{provider}: /headers checked twice, /ip never"
        );
    }
    // The gRPC check's source and destination principals: the sleep and httpbin workloads.
    let checks = std::fs::read_to_string(&task.grpc_log).unwrap();
    for line in checks.lines() {
        assert_eq!(
            line,
            "/headers\tspiffe://cluster.local/ns/foo/sa/sleep\tspiffe://cluster.local/ns/foo/sa/httpbin"
        );
    }
}

/// The ext-authz pod's sidecar: mTLS only, and only httpbin's sidecar may call the providers.
const PROVIDER_STRICT: &str = r#"---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: ext-authz-strict, namespace: foo}
spec:
  selector: {matchLabels: {app: ext-authz}}
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext-authz-callers, namespace: foo}
spec:
  selector: {matchLabels: {app: ext-authz}}
  action: ALLOW
  rules:
  - from:
    - source: {principals: ["cluster.local/ns/foo/sa/httpbin"]}
"#;

/// A DestinationRule for the provider's service that turns TLS off.
const PROVIDER_PLAINTEXT: &str = r#"---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ext-authz-plain, namespace: foo}
spec:
  host: ext-authz.foo.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}
"#;

/// Istio's auto mTLS to a provider in the mesh: the ext-authz pod (meshed, behind its own
/// sidecar, STRICT) is called over ISTIO_MUTUAL without a DestinationRule, its sidecar sees
/// httpbin's SPIFFE id; a DestinationRule's `tls` still wins (DISABLE: plaintext, refused, so
/// the check fails and the request gets statusOnError's 403).
#[test]
fn a_meshed_provider_is_called_over_auto_mtls() {
    let strict = |provider| cluster_with(provider, true, PROVIDER_STRICT);
    let Some((task, config)) = Task::start(&strict("sample-ext-authz-grpc")) else {
        return;
    };
    let mut provider_pod = Pod::new(task.outsider);
    let id = task.dir.path().join("ext-authz-id");
    mesh_identity_in(&task.ca, &id, "foo", "ext-authz");
    provider_pod.start_sidecar(
        &config,
        OUTSIDER_IP,
        "app=ext-authz",
        &[
            "--namespace",
            "foo",
            "--mesh-config",
            task.mesh.to_str().unwrap(),
            "--mesh-credentials",
            id.to_str().unwrap(),
            "--service-account",
            "ext-authz",
        ],
    );
    let (client, server) = (&task.client, &task.server);
    for (provider, log) in [
        ("sample-ext-authz-grpc", &task.grpc_log),
        ("sample-ext-authz-http", &task.http_log),
    ] {
        if provider != "sample-ext-authz-grpc" {
            std::fs::write(&config, strict(provider)).unwrap();
            server.reload_sidecar();
        }
        assert_eq!(
            call(client, "/headers", Some("deny")),
            (403, DENY_BODY.to_string()),
            "{provider}"
        );
        assert_eq!(call(client, "/headers", Some("allow")).0, 200, "{provider}");
        assert_eq!(lines(log), 2, "{provider}: both checks reached it");
    }
    // The provider's sidecar took the four checks (the HTTP provider's denial is its 403)
    // over mTLS from httpbin's workload.
    let stats = provider_pod.admin_stats();
    let from_httpbin: Vec<&str> = stats
        .lines()
        .filter(|l| {
            l.starts_with("istio_requests_total{")
                && l.contains(r#"reporter="destination""#)
                && l.contains(r#"source_principal="spiffe://cluster.local/ns/foo/sa/httpbin""#)
                && l.contains(r#"connection_security_policy="mutual_tls""#)
        })
        .collect();
    let total: f64 = from_httpbin
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, 4.0, "{stats}");

    // A DestinationRule's DISABLE wins over auto mTLS: plaintext, which STRICT refuses.
    let plain = cluster_with(
        "sample-ext-authz-http",
        true,
        &format!("{PROVIDER_STRICT}{PROVIDER_PLAINTEXT}"),
    );
    std::fs::write(&config, plain).unwrap();
    server.reload_sidecar();
    assert_eq!(call(client, "/headers", Some("allow")).0, 403);
    assert_eq!(
        lines(&task.http_log),
        2,
        "the plaintext check never reached it"
    );
    assert_eq!(
        server.metric(r#"warden_ext_authz_checks_total{outcome="error"}"#),
        1.0,
        "{}",
        server.admin_stats()
    );
}

/// A TCP service on httpbin's pod: `warden echo`'s TCP port 8078 as tcp-echo:9078.
fn tcp_service() -> String {
    format!(
        r#"---
apiVersion: v1
kind: Service
metadata: {{name: tcp-echo, namespace: foo}}
spec:
  clusterIP: 10.96.0.30
  selector: {{app: httpbin}}
  ports: [{{name: tcp, port: 9078, targetPort: 8078}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: tcp-echo-1
  namespace: foo
  labels: {{kubernetes.io/service-name: tcp-echo}}
addressType: IPv4
endpoints:
- addresses: [{SERVER_IP}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: httpbin-1, namespace: foo}}
ports: [{{name: tcp, port: 8078}}]
"#
    )
}

/// The task's policy on httpbin's inbound TCP port (Envoy's network ext_authz): its `paths`
/// are ignored there, so every connection is checked with its peers; the provider allows the
/// sleep workload's SPIFFE id (over mTLS from its sidecar), not the outsider's plaintext
/// connection, which is closed unanswered.
#[test]
fn custom_on_a_sidecar_inbound_tcp_port() {
    let config = cluster_with("sample-ext-authz-grpc", false, &tcp_service());
    let Some((task, _)) = Task::start(&config) else {
        return;
    };
    let back = task
        .client
        .ns
        .run_in(|| tcp_exchange("10.96.0.30:9078", b"hello"))
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&back).contains("hello"), "{back:?}");
    let back = task
        .outsider
        .run_in(|| tcp_exchange(&format!("{SERVER_IP}:8078"), b"hello"))
        .unwrap()
        .unwrap();
    assert!(back.is_empty(), "{back:?}");
    let checks = std::fs::read_to_string(&task.grpc_log).unwrap();
    assert_eq!(
        checks,
        format!(
            "tcp\t{CLIENT_IP}\t{SLEEP_ID}\tspiffe://cluster.local/ns/foo/sa/httpbin\n\
             tcp\t{OUTSIDER_IP}\t\t\n"
        )
    );
    for (outcome, n) in [("ok", 1.0), ("denied", 1.0)] {
        assert_eq!(
            task.server.metric(&format!(
                "warden_ext_authz_tcp_checks_total{{outcome=\"{outcome}\"}}"
            )),
            n,
            "{}",
            task.server.admin_stats()
        );
    }
}
