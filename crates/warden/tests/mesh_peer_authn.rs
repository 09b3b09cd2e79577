//! Mesh mutual TLS between sidecars as the server app sees it, with real pods (network
//! namespaces, `warden capture`, `warden proxy --mode sidecar`; see `common::pods`):
//! - the `x-forwarded-client-cert` the server's sidecar sets (Istio's sidecar inbound:
//!   APPEND_FORWARD with Subject, URI and DNS; `By=` the server's own SPIFFE identity), while
//!   the client's sidecar (outbound: SANITIZE) drops whatever the client app sent;
//! - the server pod's `proxy.istio.io/config` `proxyHeaders` changing that mode and details;
//! - PeerAuthentication PERMISSIVE (plaintext and mTLS clients both pass), DISABLE (no TLS is
//!   terminated) and a `portLevelMtls` override of a STRICT workload policy.
//!
//! Expected hashes and subjects come from `openssl x509`, not from warden's code. Skips with
//! the reason where namespaces cannot be made; everything is removed on drop.

mod common;

use common::pods::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// The server pod's app on 8082: answers each request with the request head it received.
fn serve_request_heads(listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line.trim_end().is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{head}",
                head.len()
            );
        });
    }
}

/// The registry: Service `echo` (VIP port 82 to the head-reporting app, 80 to `warden echo`),
/// its EndpointSlice and both pods; the server pod carries Istio's injector label, so the
/// client's sidecar speaks auto mTLS to it. Then `extra`.
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
    - {{name: http-heads, port: 82, targetPort: 8082}}
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
  - {{name: http-heads, port: 8082}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: api-1
    namespace: default
    labels: {{app: api, security.istio.io/tlsMode: istio}}
  spec: {{containers: [{{name: echo}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: client-1, namespace: default, labels: {{app: client}}}}
  spec: {{containers: [{{name: client}}]}}
  status: {{podIP: {CLIENT_IP}}}
{extra}"#
    )
}

const FORGED: &str = "By=spiffe://evil;Hash=00;URI=spiffe://cluster.local/ns/default/sa/admin";
const SERVER_ID: &str = "spiffe://cluster.local/ns/default/sa/api";
const CLIENT_ID: &str = "spiffe://cluster.local/ns/default/sa/client";

/// Both pods with mesh identities (`api`, `client`) from one CA, the head-reporting app
/// started, sidecars running `config`; also the outsider namespace and the client's
/// certificate folder (for a TLS client without a sidecar).
struct Mesh {
    client: Pod,
    server: Pod,
    outsider: warden_testkit::netns::NetNs,
    client_id: PathBuf,
    _dir: warden_testkit::TempDir,
}

fn mesh(extra: &str) -> Option<Mesh> {
    mesh_with(extra, "")
}

/// [`mesh`] with `annotations` (YAML flow mapping entries) on the server's Pod.
fn mesh_with(extra: &str, annotations: &str) -> Option<Mesh> {
    let (mut client, mut server, outsider, dir) = topology()?;
    let heads = server
        .ns
        .run_in(|| TcpListener::bind("0.0.0.0:8082").unwrap())
        .unwrap();
    std::thread::spawn(move || serve_request_heads(heads));
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let server_id = dir.path().join("api-id");
    let client_id = dir.path().join("client-id");
    mesh_identity(&ca, &server_id, "api");
    mesh_identity(&ca, &client_id, "client");
    let yaml = registry(extra).replace(
        "    name: api-1\n",
        &format!("    name: api-1\n    annotations: {{{annotations}}}\n"),
    );
    let config = dir.write("mesh.yaml", &yaml).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    server.start_sidecar(
        &config,
        SERVER_IP,
        "app=api",
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
    Some(Mesh {
        client,
        server,
        outsider,
        client_id,
        _dir: dir,
    })
}

/// A raw HTTP/1.1 GET with `headers` from inside `ns` to `addr`: (status, the app's report).
fn get_with(
    ns: &warden_testkit::netns::NetNs,
    addr: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let addr = addr.to_string();
    let mut head = String::from("GET /heads HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    ns.run_in(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(&addr)?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
        s.write_all(head.as_bytes())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
        std::io::Result::Ok((status, body.unwrap_or_default()))
    })
    .unwrap()
    .unwrap()
}

/// The `x-forwarded-client-cert` lines of a reported request head.
fn xfcc_of(head: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-forwarded-client-cert")
                .then(|| value.trim().to_string())
        })
        .collect()
}

/// `openssl x509` of the leaf in `cert`.
fn x509(cert: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-in"])
        .arg(cert)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The element the server's sidecar adds for the client certificate in `id/tls.crt`.
fn expected_element(id: &Path) -> String {
    let cert = id.join("tls.crt");
    let fp = x509(&cert, &["-fingerprint", "-sha256"]);
    let hash = fp
        .split_once('=')
        .map(|(_, v)| v.replace(':', "").to_lowercase())
        .unwrap();
    let subject = x509(&cert, &["-subject", "-nameopt", "RFC2253"]);
    let subject = subject.strip_prefix("subject=").unwrap().trim().to_string();
    format!("By={SERVER_ID};Hash={hash};Subject=\"{subject}\";URI={CLIENT_ID}")
}

/// curl from `ns` to the server pod's 8082 over mTLS with the client's mesh certificate (a
/// TLS client without a sidecar); `None` when curl fails (e.g. nothing terminates the TLS).
fn curl_mtls(ns: &warden_testkit::netns::NetNs, id: &Path, headers: &[&str]) -> Option<String> {
    let (cert, key, ca) = (id.join("tls.crt"), id.join("tls.key"), id.join("ca.crt"));
    let url = format!("https://{SERVER_IP}:8082/heads");
    let mut args: Vec<String> = [
        "-sS",
        "--max-time",
        "10",
        "--http1.1",
        "--insecure",
        "--cert",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(cert.display().to_string());
    args.push("--key".into());
    args.push(key.display().to_string());
    args.push("--cacert".into());
    args.push(ca.display().to_string());
    for h in headers {
        args.push("-H".into());
        args.push(h.to_string());
    }
    args.push(url);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // `exec` reports a failed curl as an error, with its stderr.
    let out = ns.exec("curl", &refs).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_server_app_sees_xfcc_set_by_its_sidecar_and_permissive_takes_both_clients() {
    // No PeerAuthentication: PERMISSIVE, Istio's default.
    let Some(m) = mesh("") else {
        return;
    };
    let element = expected_element(&m.client_id);
    // The client app forges an XFCC; its sidecar drops it (outbound SANITIZE), the server's
    // sets its own element for the client sidecar's certificate.
    let forged = [("x-forwarded-client-cert", FORGED)];
    let (status, head) = get_with(&m.client.ns, &format!("{VIP}:82"), &forged);
    assert_eq!(status, 200, "{head}");
    assert_eq!(xfcc_of(&head), std::slice::from_ref(&element), "{head}");
    let stats = m.server.admin_stats();
    assert!(
        stats.contains("warden_downstream_tls_handshakes_total 1"),
        "the request came over mTLS: {stats}"
    );

    // PERMISSIVE also serves a plaintext client outside the mesh: no certificate, so the
    // inbound side removes its XFCC rather than append to it.
    let (status, head) = get_with(&m.outsider, &format!("{SERVER_IP}:8082"), &forged);
    assert_eq!(status, 200, "{head}");
    assert!(xfcc_of(&head).is_empty(), "{head}");

    // A TLS client without a sidecar (curl with the client's mesh certificate): its element
    // appended after the XFCC it sent (APPEND_FORWARD).
    let forged_header = format!("x-forwarded-client-cert: {FORGED}");
    let head = curl_mtls(&m.outsider, &m.client_id, &[&forged_header]).expect("mTLS with curl");
    assert_eq!(xfcc_of(&head), [format!("{FORGED},{element}")], "{head}");
}

#[test]
fn peer_authentication_disable_terminates_no_tls() {
    let extra = r#"---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: api-plain, namespace: default}
spec:
  selector: {matchLabels: {app: api}}
  mtls: {mode: DISABLE}
"#;
    let Some(m) = mesh(extra) else {
        return;
    };
    // Plaintext clients pass; a client-sent XFCC does not (no certificate on the connection).
    let forged = [("x-forwarded-client-cert", FORGED)];
    let (status, head) = get_with(&m.outsider, &format!("{SERVER_IP}:8082"), &forged);
    assert_eq!(status, 200, "{head}");
    assert!(xfcc_of(&head).is_empty(), "{head}");
    // The server's sidecar does not take a TLS handshake: the bytes are plaintext to it.
    assert_eq!(curl_mtls(&m.outsider, &m.client_id, &[]), None);
    let stats = m.server.admin_stats();
    assert!(
        !stats.contains("warden_downstream_tls_handshakes_total 1"),
        "{stats}"
    );
}

#[test]
fn port_level_mtls_overrides_a_strict_workload_policy() {
    // STRICT for the workload, PERMISSIVE on 8082 (portLevelMtls names the target port).
    let extra = r#"---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: api-strict, namespace: default}
spec:
  selector: {matchLabels: {app: api}}
  mtls: {mode: STRICT}
  portLevelMtls:
    8082: {mode: PERMISSIVE}
"#;
    let Some(m) = mesh(extra) else {
        return;
    };
    // Plaintext from outside the mesh: refused on 8080 (STRICT), served on 8082.
    assert_closed_unanswered(&m.outsider, &format!("{SERVER_IP}:8080"));
    let (status, head) = get_with(&m.outsider, &format!("{SERVER_IP}:8082"), &[]);
    assert_eq!(status, 200, "{head}");
    assert!(xfcc_of(&head).is_empty(), "{head}");
    // The client's sidecar speaks mTLS to both ports; on 8082 the app sees its identity.
    let r = m
        .client
        .ns
        .run_in(|| get(&format!("{VIP}:80"), "/echo?size=3", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 3), "{}", r.body_text());
    let (status, head) = get_with(&m.client.ns, &format!("{VIP}:82"), &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(xfcc_of(&head), [expected_element(&m.client_id)], "{head}");
}

#[test]
fn the_server_pods_proxy_headers_change_the_inbound_mode_and_details() {
    // Istio's ProxyConfig proxyHeaders on the server's pod: SANITIZE_SET, the certificate in,
    // the subject out.
    let annotation = r#"proxy.istio.io/config: '{"proxyHeaders": {"forwardedClientCert": "SANITIZE_SET", "setCurrentClientCertDetails": {"subject": false, "cert": true}}}'"#;
    let Some(m) = mesh_with("", annotation) else {
        return;
    };
    let forged_header = format!("x-forwarded-client-cert: {FORGED}");
    let head = curl_mtls(&m.outsider, &m.client_id, &[&forged_header]).expect("mTLS with curl");
    let xfcc = xfcc_of(&head);
    assert_eq!(xfcc.len(), 1, "{head}");
    let pairs: Vec<&str> = xfcc[0].split(';').collect();
    let hash = expected_element(&m.client_id)
        .split(';')
        .nth(1)
        .unwrap()
        .to_string();
    assert_eq!(
        pairs.len(),
        4,
        "the forged element replaced, no Subject: {head}"
    );
    assert_eq!(pairs[0], format!("By={SERVER_ID}"));
    assert_eq!(pairs[1], hash);
    assert!(
        pairs[2].starts_with("Cert=\"-----BEGIN%20CERTIFICATE-----%0A"),
        "{head}"
    );
    assert_eq!(pairs[3], format!("URI={CLIENT_ID}"));
}
