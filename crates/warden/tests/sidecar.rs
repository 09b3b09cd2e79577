//! Sidecar mode end to end, as a user runs it: two "pods" (network namespaces joined by a veth),
//! each with an app, `warden capture` rules and `warden proxy --mode sidecar` running as uid
//! 1337; a third namespace is a client outside the mesh. The client app calls the server's
//! service VIP; the request crosses both sidecars. Runs as root (CI is root); skips with the
//! reason only where namespaces cannot be made. Every namespace is removed after, also on
//! failure (the guards' drop).

mod common;

use common::pods::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The registry as `kubectl get svc,endpointslices,pods -o yaml` prints it, plus the server
/// pod's AuthorizationPolicy (only clients of the pods' subnet) and `extra`.
fn registry(extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {{name: echo, namespace: default}}
  spec:
    clusterIP: {VIP}
    selector: {{app: api}}
    ports:
    - {{name: http, port: 80, targetPort: 8080}}
    - {{name: tcp-echo, port: 8078, targetPort: 8078}}
    # No protocol in the name: both sidecars detect it from the first bytes.
    - {{name: headers, port: 81, targetPort: 8081}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: echo-1
    namespace: default
    labels: {{kubernetes.io/service-name: echo}}
  addressType: IPv4
  endpoints:
  - addresses: [{SERVER_IP}]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: api-1, namespace: default}}
  ports:
  - {{name: http, port: 8080}}
  - {{name: tcp-echo, port: 8078}}
  - {{name: headers, port: 8081}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: api-1, namespace: default, labels: {{app: api}}}}
  spec: {{containers: [{{name: echo}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: client-1, namespace: default, labels: {{app: client}}}}
  spec: {{containers: [{{name: client}}]}}
  status: {{podIP: {CLIENT_IP}}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: pods-only, namespace: default}}
spec:
  selector: {{matchLabels: {{app: api}}}}
  action: ALLOW
  rules:
  - from: [{{source: {{ipBlocks: ["10.231.1.0/24"]}}}}]
{extra}"#
    )
}

#[test]
fn requests_cross_both_sidecars_with_inbound_policy_tcp_and_uploads() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let config = dir.write("mesh.yaml", &registry("")).unwrap();
    server.start_sidecar(&config, SERVER_IP, "app=api", &[]);
    client.start_sidecar(&config, CLIENT_IP, "app=client", &[]);

    // The client app calls the service VIP; the echo answers through both sidecars.
    let vip = format!("{VIP}:80");
    let r = client
        .ns
        .run_in(|| get(&vip, "/echo?size=5", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 5), "{}", r.body_text());
    // By the service's other names too.
    for host in ["echo.default.svc.cluster.local", VIP] {
        let r = client.ns.run_in(|| get(&vip, "/", host)).unwrap().unwrap();
        assert_eq!(r.status, 200, "Host {host}");
    }

    // The app sees the inbound passthrough's source and the client pod in x-forwarded-for.
    let r = client
        .ns
        .run_in(|| get(&format!("{VIP}:81"), "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(r.body_text(), format!("peer=127.0.0.6 xff={CLIENT_IP}"));
    let counts = server
        .ns
        .run_in(|| get("127.0.0.1:8080", "/count", "x"))
        .unwrap()
        .unwrap()
        .body_text();
    assert!(counts.contains("\"127.0.0.6\":3"), "{counts}");

    // Both sidecars counted the requests: outbound on the client's route to the service,
    // inbound on the server's.
    let out = client.admin_stats();
    assert!(
        out.contains(r#"route="echo.default.svc.cluster.local:80",code="200"} 3"#),
        "{out}"
    );
    let inbound = server.admin_stats();
    assert!(
        inbound.contains(r#"route="inbound",code="200"} 4"#),
        "{inbound}"
    );

    // A client outside the pods' subnet is denied by the server pod's policy.
    let r = outsider
        .run_in(|| get(&format!("{SERVER_IP}:8080"), "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (403, "RBAC: access denied")
    );
    // Dialed at the inbound listener's own port, it is closed unanswered: serving it would
    // send it back into the listener, in a loop.
    assert_closed_unanswered(&outsider, &format!("{SERVER_IP}:15006"));

    // TCP through both sidecars, with half-close: all bytes back.
    let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = client
        .ns
        .run_in(|| {
            let mut s = TcpStream::connect(format!("{VIP}:8078")).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut w = s.try_clone().unwrap();
            let data = sent.clone();
            let writer = std::thread::spawn(move || {
                w.write_all(&data).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            writer.join().unwrap();
            back
        })
        .unwrap();
    assert!(
        echoed == sent,
        "TCP echo: {} of {} bytes",
        echoed.len(),
        sent.len()
    );

    // A 10 MB upload passes intact (the echo returns the body it got).
    let upload: Vec<u8> = (0..10_000_000u32).map(|i| (i % 253) as u8).collect();
    let r = client
        .ns
        .run_in(|| request(&vip, "POST", "/echo", "echo", &upload))
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.body == upload,
        "upload: {} of {} bytes back",
        r.body.len(),
        upload.len()
    );

    // ALLOW_ANY: a destination the registry does not know passes through (to the pod's own
    // port, which the server pod's inbound capture and sidecar then serve).
    let r = client
        .ns
        .run_in(|| get(&format!("{SERVER_IP}:8080"), "/echo?size=2", "other"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 2));
    drop(outsider);
}

#[test]
fn seed_000_inbound_local_limit_and_registry_only() {
    let Some((mut client, mut server, _outsider, dir)) = topology() else {
        return;
    };
    // Seed 000's local rate limit EnvoyFilter, as written (10 requests per minute, inbound, for
    // the `app: api` workload).
    let seed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/ratelimit-local/seed-envoyfilter-local.yaml"
    ))
    .unwrap();
    let config = dir
        .write("mesh.yaml", &registry(&format!("---\n{seed}")))
        .unwrap();
    server.start_sidecar(&config, SERVER_IP, "app=api", &[]);
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &["--outbound-traffic-policy", "REGISTRY_ONLY"],
    );
    let vip = format!("{VIP}:80");
    let codes: Vec<u16> = client
        .ns
        .run_in(|| {
            (0..12)
                .map(|_| get(&vip, "/", "echo").unwrap().status)
                .collect()
        })
        .unwrap();
    assert_eq!(codes[..10], [200; 10], "{codes:?}");
    assert_eq!(codes[10..], [429, 429], "{codes:?}");

    // REGISTRY_ONLY: an unknown host on an HTTP port gets 502; an unknown TCP destination
    // is closed without a byte.
    let r = client
        .ns
        .run_in(|| get(&format!("{SERVER_IP}:80"), "/", "unknown.example"))
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 502);
    assert_closed_unanswered(&client.ns, &format!("{SERVER_IP}:8080"));
}

#[test]
fn mesh_mtls_strict_server_with_a_principal_policy() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let (server_id, client_id, intruder_id) = (
        dir.path().join("api-id"),
        dir.path().join("client-id"),
        dir.path().join("intruder-id"),
    );
    mesh_identity(&ca, &server_id, "api");
    mesh_identity(&ca, &client_id, "client");
    mesh_identity(&ca, &intruder_id, "intruder");
    // The server pod takes mTLS only, and only from the client's identity; the client's
    // sidecar originates ISTIO_MUTUAL to the service (auto mTLS on port 80, a DestinationRule
    // on 8078).
    let extra = r#"---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: api-strict, namespace: default}
spec:
  selector: {matchLabels: {app: api}}
  mtls: {mode: STRICT}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-mtls, namespace: default}
spec:
  host: echo.default.svc.cluster.local
  trafficPolicy:
    portLevelSettings: [{port: {number: 8078}, tls: {mode: ISTIO_MUTUAL}}]
"#;
    // Port 80 by auto mTLS (the pod carries the injector's tlsMode label), 8078 by the rule.
    let yaml = registry(extra)
        .replace(
            r#"ipBlocks: ["10.231.1.0/24"]"#,
            "principals: [cluster.local/ns/default/sa/client]",
        )
        .replace(
            "labels: {app: api}}",
            "labels: {app: api, security.istio.io/tlsMode: istio}}",
        );
    let config = dir.write("mesh.yaml", &yaml).unwrap();
    let id = |p: &std::path::Path| p.to_str().unwrap().to_string();
    server.start_sidecar(
        &config,
        SERVER_IP,
        "app=api",
        &[
            "--mesh-credentials",
            &id(&server_id),
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
            &id(&client_id),
            "--service-account",
            "client",
        ],
    );

    // HTTP and TCP cross both sidecars over mTLS; the policy sees the client's identity.
    let vip = format!("{VIP}:80");
    let r = client
        .ns
        .run_in(|| get(&vip, "/echo?size=5", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 5), "{}", r.body_text());
    let echoed = client
        .ns
        .run_in(|| {
            let mut s = TcpStream::connect(format!("{VIP}:8078")).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(b"over mtls").unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            back
        })
        .unwrap();
    assert_eq!(echoed, b"over mtls");
    let stats = server.admin_stats();
    assert!(
        stats.contains("warden_downstream_tls_handshakes_total 2"),
        "{stats}"
    );

    // A plaintext client (no sidecar) is refused by the STRICT server: closed, no answer.
    assert_closed_unanswered(&outsider, &format!("{SERVER_IP}:8080"));
    let stats = server.admin_stats();
    assert!(
        stats.contains(
            r#"warden_downstream_tls_handshake_failures_total{reason="plaintext_refused"} 1"#
        ),
        "{stats}"
    );

    // Another mesh identity gets through mTLS but not through the policy.
    drop(client.procs.pop());
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &[
            "--mesh-credentials",
            &id(&intruder_id),
            "--service-account",
            "intruder",
        ],
    );
    let r = client
        .ns
        .run_in(|| get(&vip, "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (403, "RBAC: access denied")
    );
}
