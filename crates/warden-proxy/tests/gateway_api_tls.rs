//! Gateway API listeners beyond plain HTTP, with real clients: HTTPS terminated with a
//! certificateRef from the credentials folder (user-guides/cross-namespace-routing's Gateway),
//! TLS passed through by SNI to a TLSRoute's backend and terminated for a TCPRoute
//! (user-guides/tls-routing), a TCPRoute (user-guides/tcp-routing), and a GRPCRoute's method
//! matches (basic-grpc.yaml). Fixtures: tests/fixtures/gateway-api (NOTICE.md there).

mod common;

use common::*;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_testkit::pki::Pki;
use warden_testkit::TempDir;

fn fixture(name: &str) -> String {
    common::kube_dump::fixture("gateway-api", name)
}

/// A Service `name` of `ns` on `port` (a TCP port), its endpoint `at`.
fn service(ns: &str, name: &str, port: u16, at: std::net::SocketAddr) -> String {
    common::kube_dump::service_with_port_name(ns, name, "tcp", port, at)
}

/// The credentials folder `name` (tls.crt, tls.key) for a certificate of `host`.
fn credential(creds: &TempDir, pki: &Pki, name: &str, host: &str) {
    let (cert, key) = pki.issue_pem(&leaf(host));
    creds.write(&format!("{name}/tls.crt"), &cert).unwrap();
    creds.write(&format!("{name}/tls.key"), &key).unwrap();
}

fn start_with_credentials(yaml: &str, creds: &Path) -> RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.credentials_dir = Some(creds.to_path_buf());
    Proxy::start(opts).expect("proxy starts")
}

/// curl `https://host:port{path}` through `addr`, trusting `ca`: the status code and body.
async fn https_get(addr: std::net::SocketAddr, host: &str, path: &str, ca: &Path) -> String {
    let (ok, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--max-time".into(),
            "5".into(),
            "--cacert".into(),
            ca.display().to_string(),
            "--resolve".into(),
            format!("{host}:{}:127.0.0.1", addr.port()),
            "-D".into(),
            "-".into(),
            format!("https://{host}:{}{path}", addr.port()),
        ],
    )
    .await;
    assert!(ok, "curl {host}{path}: {out}");
    out
}

/// cross-namespace-routing/gateway.yaml as written but its port (443 made 0): the HTTPS
/// listener terminates with Secret `foo-example-com`, a folder of `--credentials-dir`.
#[tokio::test]
async fn https_listener_terminates_with_the_certificate_ref() {
    let pki = Pki::new("gwapi");
    let creds = TempDir::new("creds").unwrap();
    credential(&creds, &pki, "foo-example-com", "foo.example.com");
    let home = echo_http("home").await;
    let yaml = format!(
        "{}\n---\n{}\n---\n{}\n{}",
        fixture("cross-namespace-routing-gateway.yaml").replace("port: 443", "port: 0"),
        fixture("cross-namespace-routing-0-namespaces.yaml"),
        fixture("cross-namespace-routing-site-route.yaml"),
        service("site-ns", "home", 8080, home.addr),
    );
    let proxy = start_with_credentials(&yaml, creds.path());
    let addr = addr(&proxy, 0);
    let out = https_get(addr, "foo.example.com", "/", &pki.ca_path).await;
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/2 200"),
        "{out}"
    );
    assert!(out.contains("x-upstream: home"), "{out}");
}

/// tls-routing: `foo.example.com` passed through untouched to the TLSRoute's backend (curl
/// verifies the backend's own certificate), and the Terminate listener's TCPRoute gets the
/// plaintext.
#[tokio::test]
async fn tls_passthrough_by_sni_and_terminated_tls_to_a_tcp_route() {
    let pki = Pki::new("tlsroute");
    let backend = tls_backend(&pki, "foo.example.com").await;
    let creds = TempDir::new("creds").unwrap();
    credential(&creds, &pki, "tls-terminate-certificate", "bar.example.com");
    let plain = echo_tcp().await;
    let terminate_port = warden_testkit::free_port().unwrap();
    let tcp_route = "apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: terminated}
spec:
  parentRefs: [{name: example-gateway, sectionName: tls-terminate}]
  rules:
  - backendRefs: [{name: plain, port: 7000}]
";
    let yaml = format!(
        "{}\n---\n{}\n---\n{tcp_route}{}{}",
        fixture("tls-routing-gateway.yaml")
            .replace("port: 443", "port: 0")
            .replace("port: 8443", &format!("port: {terminate_port}")),
        fixture("tls-routing-tls-route.yaml"),
        service("default", "foo-svc", 443, backend),
        service("default", "plain", 7000, plain),
    );
    let proxy = start_with_credentials(&yaml, creds.path());
    let gw = addr(&proxy, 0);
    let out = https_get(gw, "foo.example.com", "/", &pki.ca_path).await;
    assert!(out.contains("backend foo.example.com"), "{out}");

    // The terminated listener: TLS to the proxy, plain bytes to the TCP echo.
    let at = proxy
        .listener_addr(terminate_port)
        .expect("terminate listener");
    let tcp = tokio::net::TcpStream::connect(at).await.unwrap();
    let connector = warden_tls::tokio_rustls::TlsConnector::from(client_config(&pki.ca_path));
    let name = warden_tls::rustls::pki_types::ServerName::try_from("bar.example.com").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .expect("handshake with the listener's certificate");
    tls.write_all(b"ping").await.unwrap();
    tls.shutdown().await.unwrap();
    let mut got = Vec::new();
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_to_end(&mut got)).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "pingbye",
        "the TCP echo answers through TLS"
    );
}

/// tcp-routing: the TCPRoute's Service gets the connection's bytes.
#[tokio::test]
async fn tcp_route_relays_to_its_service() {
    let echo = echo_tcp().await;
    let yaml = format!(
        "{}\n---\n{}{}",
        fixture("tcp-routing-gateway.yaml").replace("port: 8080", "port: 0"),
        fixture("tcp-routing-tcp-route.yaml"),
        service("default", "my-foo-service", 6000, echo),
    );
    let proxy = start(&yaml);
    let mut s = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    s.write_all(b"hello").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hellobye");
}

/// basic-grpc.yaml's GRPCRoute on an HTTP listener: each method goes to its Service; the
/// second rule also needs its header.
#[tokio::test]
async fn grpc_route_matches_service_method_and_headers() {
    let one = echo_http("my-service1").await;
    let two = echo_http("my-service2").await;
    let grpc = fixture("basic-grpc.yaml");
    let route = grpc
        .split("\n---\n")
        .find(|d| d.contains("kind: GRPCRoute"))
        .expect("a GRPCRoute")
        .replace("name: my-gateway", "name: example-gateway");
    let yaml = format!(
        "{}\n---\n{route}{}{}",
        fixture("http-routing-gateway.yaml")
            .replace("port: 80", "port: 0")
            .split("\n---\n")
            .next()
            .unwrap_or_default(),
        service("default", "my-service1", 50051, one.addr),
        service("default", "my-service2", 50051, two.addr),
    );
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    // HTTP/2 names the host in :authority (a Host header beside it would be a second one).
    let c = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .resolve("example.com", addr)
        .build()
        .unwrap();
    let port = addr.port();
    let call = |path: &'static str, magic: Option<&'static str>| {
        let mut req = c
            .post(format!("http://example.com:{port}{path}"))
            .header("content-type", "application/grpc");
        if let Some(m) = magic {
            req = req.header("magic", m);
        }
        req.send()
    };
    let who = |r: reqwest::Response| {
        r.headers()
            .get("x-upstream")
            .map_or(r.status().as_u16().to_string(), |v| {
                v.to_str().unwrap().to_string()
            })
    };
    assert_eq!(
        who(call("/com.example.User/Login", None).await.unwrap()),
        "my-service1"
    );
    assert_eq!(
        who(call("/com.example.Things/DoThing", Some("foo"))
            .await
            .unwrap()),
        "my-service2"
    );
    assert_eq!(
        who(call("/com.example.Things/DoThing", None).await.unwrap()),
        "404"
    );
    assert_eq!(
        who(call("/com.example.User/Logout", None).await.unwrap()),
        "404"
    );
}
