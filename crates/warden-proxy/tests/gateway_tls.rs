//! Gateway HTTPS/TLS with real clients (curl, openssl s_client): SIMPLE and MUTUAL servers on
//! one port chosen by SNI, ALPN h2, client certificates refused (none, wrong CA), handshake
//! failures counted by reason, bad certificate files named, PASSTHROUGH to a TLS backend,
//! upstream MUTUAL TLS to nginx, certificate rotation under load with no failed request, and
//! `x-forwarded-client-cert` per `gatewayTopology.forwardClientCertDetails` (MUTUAL,
//! OPTIONAL_MUTUAL and plaintext servers; the annotation over the mesh config).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::TempDir;
use warden_tls::rustls;

/// curl `https://host:port/path` through the proxy at `addr`, printing code and version.
async fn curl(addr: std::net::SocketAddr, host: &str, ca: &Path, extra: &[&str]) -> (bool, String) {
    let mut args: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "5".into(),
        "--cacert".into(),
        ca.display().to_string(),
        "--resolve".into(),
        format!("{host}:{}:127.0.0.1", addr.port()),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_code} %{http_version}".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(format!("https://{host}:{}/hello", addr.port()));
    run("curl", args).await
}

/// curl's arguments presenting a client certificate.
fn cert_args(cert: &Path, key: &Path) -> Vec<String> {
    vec![
        "--cert".into(),
        cert.display().to_string(),
        "--key".into(),
        key.display().to_string(),
    ]
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

async fn s_client(addr: std::net::SocketAddr, sni: &str, ca: &Path, extra: &[&str]) -> String {
    let mut args: Vec<String> = vec![
        "s_client".into(),
        "-connect".into(),
        addr.to_string(),
        "-servername".into(),
        sni.into(),
        "-CAfile".into(),
        ca.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run("openssl", args).await.1
}

fn metrics_line(proxy: &RunningProxy, reason: &str) -> Option<f64> {
    let text = proxy.metrics_text();
    let key = format!("warden_downstream_tls_handshake_failures_total{{reason=\"{reason}\"}}");
    text.lines()
        .find(|l| l.starts_with(&key))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A gateway on one free port with two HTTPS servers: `a.example.com` SIMPLE from file paths,
/// `b.example.com` MUTUAL from the credentials folder `b-cred`; both route to `echo`.
fn two_servers_yaml(a_cert: &Path, a_key: &Path, echo: std::net::SocketAddr) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  servers:
  - port: {{number: 0, protocol: HTTPS, name: https-a}}
    hosts: [a.example.com]
    tls: {{mode: SIMPLE, serverCertificate: {a_cert}, privateKey: {a_key}, minProtocolVersion: TLSV1_2}}
  - port: {{number: 0, protocol: HTTPS, name: https-b}}
    hosts: [b.example.com]
    tls: {{mode: MUTUAL, credentialName: b-cred}}
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: [a.example.com, b.example.com]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: echo.internal}}}}]
"#,
        a_cert = a_cert.display(),
        a_key = a_key.display(),
        se = service_entry("echo.internal", &[echo]),
    )
}

struct TwoServers {
    pki: Pki,
    other: Pki,
    creds: TempDir,
    proxy: RunningProxy,
    addr: std::net::SocketAddr,
}

async fn two_servers() -> TwoServers {
    let echo = echo_http("echo").await;
    let pki = Pki::new("gw");
    let other = Pki::new("other");
    let (a_cert, a_key) = pki.issue("a", &leaf("a.example.com"));
    let creds = TempDir::new("creds").unwrap();
    let (b_cert, b_key) = pki.issue_pem(&leaf("b.example.com"));
    creds.write("b-cred/tls.crt", &b_cert).unwrap();
    creds.write("b-cred/tls.key", &b_key).unwrap();
    creds
        .write(
            "b-cred/ca.crt",
            &std::fs::read_to_string(&pki.ca_path).unwrap(),
        )
        .unwrap();
    let mut opts = ProxyOptions::loopback(inline(&two_servers_yaml(&a_cert, &a_key, echo.addr)));
    opts.credentials_dir = Some(creds.path().to_path_buf());
    let proxy = Proxy::start(opts).expect("proxy starts");
    let addr = addr(&proxy, 0);
    TwoServers {
        pki,
        other,
        creds,
        proxy,
        addr,
    }
}

#[tokio::test]
async fn sni_selects_the_server_and_alpn_h2_reaches_the_same_routes() {
    let t = two_servers().await;
    let ca = t.pki.ca_path.clone();
    let (ok, out) = curl(t.addr, "a.example.com", &ca, &["--http1.1"]).await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "200 1.1");
    let (ok, out) = curl(t.addr, "a.example.com", &ca, &["--http2"]).await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "200 2", "ALPN h2 over TLS to the same routes");
    // Each name gets its own certificate.
    let a = s_client(t.addr, "a.example.com", &ca, &["-alpn", "h2,http/1.1"]).await;
    assert!(
        a.contains("CN=a.example.com") || a.contains("CN = a.example.com"),
        "{a}"
    );
    assert!(a.contains("ALPN protocol: h2"), "{a}");
    let b = s_client(t.addr, "b.example.com", &ca, &[]).await;
    assert!(
        b.contains("CN=b.example.com") || b.contains("CN = b.example.com"),
        "{b}"
    );
    // A name no server has gets no handshake.
    let none = s_client(t.addr, "c.example.com", &ca, &[]).await;
    assert!(
        !none.contains("CN=a.example.com") && !none.contains("BEGIN CERTIFICATE"),
        "{none}"
    );
    assert_eq!(metrics_line(&t.proxy, "no_matching_server"), Some(1.0));
    drop(t.creds);
}

#[tokio::test]
async fn mutual_refuses_clients_without_a_certificate_or_from_another_ca() {
    let t = two_servers().await;
    let ca = t.pki.ca_path.clone();
    let (ok, out) = curl(t.addr, "b.example.com", &ca, &[]).await;
    assert!(!ok, "no client certificate must be refused: {out}");
    let (bad_cert, bad_key) = t.other.issue("stranger", &leaf("stranger"));
    let args = cert_args(&bad_cert, &bad_key);
    let (ok, out) = curl(t.addr, "b.example.com", &ca, &as_strs(&args)).await;
    assert!(!ok, "a certificate from another CA must be refused: {out}");
    let (cert, key) = t.pki.issue("client", &leaf("client"));
    let args = cert_args(&cert, &key);
    let (ok, out) = curl(t.addr, "b.example.com", &ca, &as_strs(&args)).await;
    assert!(ok, "{out}");
    assert!(out.starts_with("200"), "{out}");
    // openssl s_client without a certificate: the handshake fails too.
    let s = s_client(t.addr, "b.example.com", &ca, &[]).await;
    assert!(!s.contains("HTTP/1.1 200"), "{s}");
    assert!(metrics_line(&t.proxy, "no_client_certificate").unwrap_or(0.0) >= 2.0);
    assert!(metrics_line(&t.proxy, "unknown_ca").unwrap_or(0.0) >= 1.0);
    // The SIMPLE server on the same port asks for no certificate.
    let (ok, out) = curl(t.addr, "a.example.com", &ca, &[]).await;
    assert!(ok && out.starts_with("200"), "{out}");
}

fn config_error(yaml: &str, creds: Option<&Path>) -> String {
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.credentials_dir = creds.map(Path::to_path_buf);
    match Proxy::start(opts) {
        Ok(_) => panic!("config must be refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn bad_certificate_files_are_named_with_the_problem() {
    let echo = echo_http("echo").await;
    let pki = Pki::new("bad");
    let (cert, key) = pki.issue("good", &leaf("a.example.com"));
    let (_, other_key) = pki.issue("other", &leaf("other"));
    let (expired, expired_key) = pki.issue(
        "expired",
        &Leaf {
            validity: Some((-7200, -3600)),
            ..leaf("a.example.com")
        },
    );
    let missing = pki.path("nope.crt");
    let case = |c: &Path, k: &Path| two_servers_yaml(c, k, echo.addr);
    let e = config_error(&case(&missing, &key), None);
    assert!(e.contains("nope.crt: file not found"), "{e}");
    assert!(e.contains("serverCertificate"), "{e}");
    let e = config_error(&case(&expired, &expired_key), None);
    assert!(e.contains("expired.crt") && e.contains("expired"), "{e}");
    let e = config_error(&case(&cert, &other_key), None);
    assert!(
        e.contains("other.key: private key does not match the certificate in"),
        "{e}"
    );
    // credentialName without --credentials-dir, unknown cipher suite, TLS 1.1.
    let e = config_error(&case(&cert, &key), None);
    assert!(
        e.contains("credentialName") && e.contains("--credentials-dir"),
        "{e}"
    );
    let yaml = case(&cert, &key).replace(
        "minProtocolVersion: TLSV1_2",
        "minProtocolVersion: TLSV1_1, cipherSuites: [ECDHE-RSA-AES128-GCM-SHA256, NOPE-SHA]",
    );
    let creds = TempDir::new("creds").unwrap();
    let e = config_error(&yaml, Some(creds.path()));
    assert!(e.contains("TLSV1_1"), "{e}");
    assert!(e.contains("unknown cipher suite \"NOPE-SHA\""), "{e}");
    assert!(e.contains("b-cred/tls.crt: file not found"), "{e}");
    assert!(e.contains("spec.servers[0].tls.cipherSuites"), "{e}");
}

#[tokio::test]
async fn passthrough_forwards_the_clients_tls_to_the_backend_by_sni() {
    let pki = Pki::new("pass");
    let backend = tls_backend(&pki, "p.example.com").await;
    let yaml = format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  servers:
  - port: {{number: 0, protocol: TLS, name: tls}}
    hosts: [p.example.com]
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: backend}}
spec:
  hosts: [p.example.com]
  resolution: STATIC
  ports: [{{number: 443, name: tls, protocol: TLS}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tls: {port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: pass}}
spec:
  hosts: [p.example.com]
  gateways: [gw]
  tls:
  - match: [{{sniHosts: [p.example.com]}}]
    route: [{{destination: {{host: p.example.com, port: {{number: 443}}}}}}]
"#,
        port = backend.port()
    );
    let proxy = start(&yaml);
    let gw = addr(&proxy, 0);
    // curl verifies the backend's own certificate: the gateway did not terminate.
    let (ok, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--max-time".into(),
            "5".into(),
            "--cacert".into(),
            pki.ca_path.display().to_string(),
            "--resolve".into(),
            format!("p.example.com:{}:127.0.0.1", gw.port()),
            format!("https://p.example.com:{}/", gw.port()),
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out, "backend p.example.com");
    let other = s_client(gw, "q.example.com", &pki.ca_path, &[]).await;
    assert!(!other.contains("BEGIN CERTIFICATE"), "{other}");
}

#[tokio::test]
async fn upstream_mutual_tls_to_nginx_presents_the_client_certificate() {
    let pki = Pki::new("up");
    let (srv_cert, srv_key) = pki.issue(
        "upstream",
        &Leaf {
            loopback_ip: true,
            ..leaf("upstream.internal")
        },
    );
    let (cli_cert, cli_key) = pki.issue("gateway-client", &leaf("gateway-client"));
    let nginx = warden_testkit::Nginx::start(&format!(
        r#"server {{
  listen {{listen}} ssl;
  ssl_certificate {srv_cert};
  ssl_certificate_key {srv_key};
  ssl_client_certificate {ca};
  ssl_verify_client on;
  location / {{ return 200 "client $ssl_client_s_dn"; }}
}}"#,
        srv_cert = srv_cert.display(),
        srv_key = srv_key.display(),
        ca = pki.ca_path.display(),
    ))
    .expect("nginx with ssl");
    let dr = |tls: &str| {
        format!(
            r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: upstream}}
spec:
  hosts: [upstream.internal]
  resolution: STATIC
  ports: [{{number: 443, name: https, protocol: HTTPS}}]
  endpoints: [{{address: 127.0.0.1, ports: {{https: {port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: upstream}}
spec:
  host: upstream.internal
  trafficPolicy:
    tls: {tls}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: upstream.internal, port: {{number: 443}}}}}}]
"#,
            gw = gateway(&[(0, "HTTP")]),
            port = nginx.addr().port(),
        )
    };
    let mutual = format!(
        "{{mode: MUTUAL, clientCertificate: {}, privateKey: {}, caCertificates: {}}}",
        cli_cert.display(),
        cli_key.display(),
        pki.ca_path.display()
    );
    let proxy = start(&dr(&mutual));
    let url = format!("http://{}/", addr(&proxy, 0));
    let resp = client().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "client CN=gateway-client");
    drop(proxy);
    // SIMPLE: nginx asks for a certificate the gateway does not have.
    let simple = format!(
        "{{mode: SIMPLE, caCertificates: {}}}",
        pki.ca_path.display()
    );
    let proxy = start(&dr(&simple));
    let resp = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400, "nginx: no required SSL certificate");
    drop(proxy);
    // A SAN the upstream does not have: the handshake is refused, 503.
    let pinned = format!(
        "{{mode: MUTUAL, clientCertificate: {}, privateKey: {}, caCertificates: {}, subjectAltNames: [spiffe://elsewhere/ns/x/sa/y]}}",
        cli_cert.display(),
        cli_key.display(),
        pki.ca_path.display()
    );
    let proxy = start(&dr(&pinned));
    let resp = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
}

/// New TLS connections (a request each) from `workers` tasks until `stop`; the failures and the
/// certificate serial numbers (DER of the leaf) seen.
async fn hammer(
    addr: std::net::SocketAddr,
    ca: PathBuf,
    until: Instant,
) -> (usize, usize, Vec<Vec<u8>>) {
    let connector = warden_tls::tokio_rustls::TlsConnector::from(client_config(&ca));
    let (mut ok, mut failed, mut seen) = (0, 0, Vec::<Vec<u8>>::new());
    // Bounded in count as well as time.
    for _ in 0..20_000 {
        if Instant::now() >= until {
            break;
        }
        let attempt = async {
            let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
            let name = rustls::pki_types::ServerName::try_from("a.example.com").ok()?;
            let mut tls = connector.connect(name, tcp).await.ok()?;
            let leaf = tls.get_ref().1.peer_certificates()?.first()?.to_vec();
            tls.write_all(b"GET / HTTP/1.1\r\nhost: a.example.com\r\nconnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            out.starts_with(b"HTTP/1.1 200").then_some(leaf)
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Some(leaf)) => {
                ok += 1;
                if !seen.contains(&leaf) {
                    seen.push(leaf);
                }
            }
            _ => failed += 1,
        }
    }
    (ok, failed, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_without_a_failed_request() {
    let echo = echo_http("echo").await;
    let pki = Pki::new("rot");
    let (cert, key) = pki.issue("a", &leaf("a.example.com"));
    let dir = TempDir::new("rot-config").unwrap();
    let config = dir
        .write(
            "gw.yaml",
            &two_servers_yaml(&cert, &key, echo.addr)
                .replace("  - port: {number: 0, protocol: HTTPS, name: https-b}\n    hosts: [b.example.com]\n    tls: {mode: MUTUAL, credentialName: b-cred}\n", ""),
        )
        .unwrap();
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![config]));
    opts.watch_config = true;
    let proxy = Proxy::start(opts).expect("proxy starts");
    let gw = addr(&proxy, 0);
    // A keep-alive HTTPS connection opened before the rotation stays usable after it.
    let kept_config = client_config(&pki.ca_path);
    let tcp = tokio::net::TcpStream::connect(gw).await.unwrap();
    let mut kept = warden_tls::tokio_rustls::TlsConnector::from(kept_config)
        .connect(
            rustls::pki_types::ServerName::try_from("a.example.com").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let ask = b"GET /kept HTTP/1.1\r\nhost: a.example.com\r\n\r\n";
    kept.write_all(ask).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

    let until = Instant::now() + Duration::from_secs(6);
    let load: Vec<_> = (0..4)
        .map(|_| tokio::spawn(hammer(gw, pki.ca_path.clone(), until)))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Rotate: the new certificate and key replace the old files (each renamed into place).
    let (new_cert, new_key) = pki.issue_pem(&leaf("a.example.com"));
    let tmp = dir.write("new.key", &new_key).unwrap();
    std::fs::rename(&tmp, &key).unwrap();
    let tmp = dir.write("new.crt", &new_cert).unwrap();
    std::fs::rename(&tmp, &cert).unwrap();
    let (mut ok, mut failed, mut seen) = (0, 0, Vec::new());
    for l in load {
        let (o, f, s) = l.await.unwrap();
        ok += o;
        failed += f;
        for leaf in s {
            if !seen.contains(&leaf) {
                seen.push(leaf);
            }
        }
    }
    assert_eq!(failed, 0, "{ok} requests succeeded");
    assert!(ok > 20, "{ok}");
    assert_eq!(
        seen.len(),
        2,
        "both the old and the new certificate were served"
    );
    kept.write_all(ask).await.unwrap();
    let n = kept.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "the old connection still works"
    );
}

#[tokio::test]
async fn a_mutual_gateways_client_identity_reaches_authorization_policies() {
    let echo = echo_http("echo").await;
    let pki = Pki::new("id");
    let (cert, key) = pki.issue("gw", &leaf("m.example.com"));
    let yaml = format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  servers:
  - port: {{number: 0, protocol: HTTPS, name: https}}
    hosts: [m.example.com]
    tls: {{mode: MUTUAL, serverCertificate: {cert}, privateKey: {key}, caCertificates: {ca}}}
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: [m.example.com]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: echo.internal}}}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: only-client, namespace: default}}
spec:
  action: ALLOW
  rules:
  - from: [{{source: {{principals: [cluster.local/ns/default/sa/client]}}}}]
"#,
        cert = cert.display(),
        key = key.display(),
        ca = pki.ca_path.display(),
        se = service_entry("echo.internal", &[echo.addr]),
    );
    let proxy = start(&yaml);
    let gw = addr(&proxy, 0);
    let with_identity = |uri: &str| Leaf {
        uris: vec![uri.into()],
        ..leaf("someone")
    };
    let (c1, k1) = pki.issue(
        "c1",
        &with_identity("spiffe://cluster.local/ns/default/sa/client"),
    );
    let (c2, k2) = pki.issue(
        "c2",
        &with_identity("spiffe://cluster.local/ns/default/sa/other"),
    );
    let args = cert_args(&c1, &k1);
    let (ok, out) = curl(gw, "m.example.com", &pki.ca_path, &as_strs(&args)).await;
    assert!(ok && out.starts_with("200"), "{out}");
    let args = cert_args(&c2, &k2);
    let (ok, out) = curl(gw, "m.example.com", &pki.ca_path, &as_strs(&args)).await;
    assert!(
        ok && out.starts_with("403"),
        "another identity is denied: {out}"
    );
}

// x-forwarded-client-cert at the gateway (Envoy's forward_client_cert_details as Istio sets it:
// gatewayTopology.forwardClientCertDetails, SANITIZE_SET by default, with Subject, Cert, URI
// and DNS). The expected Hash and Subject come from openssl, not from warden's own code.

const FORGED: &str = "By=spiffe://evil;Hash=00;URI=spiffe://cluster.local/ns/default/sa/admin";

/// `openssl x509` of `cert` with `args`, trimmed.
async fn x509(cert: &Path, args: &[&str]) -> String {
    let mut all: Vec<String> = vec!["x509".into(), "-noout".into(), "-in".into()];
    all.push(cert.display().to_string());
    all.extend(args.iter().map(|s| s.to_string()));
    let (ok, out) = run("openssl", all).await;
    assert!(ok, "{out}");
    out.trim().to_string()
}

/// Envoy's `Hash=` and `Subject=` of a certificate file, as OpenSSL computes them.
async fn hash_and_subject(cert: &Path) -> (String, String) {
    let fp = x509(cert, &["-fingerprint", "-sha256"]).await;
    let hash = fp
        .split_once('=')
        .map(|(_, v)| v.replace(':', "").to_lowercase())
        .unwrap();
    let subject = x509(cert, &["-subject", "-nameopt", "RFC2253"]).await;
    let subject = subject.strip_prefix("subject=").unwrap().to_string();
    (hash, subject)
}

/// The `x-forwarded-client-cert` the echo upstream received, from curl's `-D -` output.
fn echoed_xfcc(out: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("x-echo-h-x-forwarded-client-cert")
            .then(|| value.trim().to_string())
    })
}

/// Undo the `%XX` escapes of a `Cert=` value.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// A gateway with one HTTPS server for `x.example.com` in `mode` (MUTUAL, OPTIONAL_MUTUAL),
/// its certificate carrying the ingress gateway's SPIFFE URI (`By=`), routing to an echo
/// that reflects request headers; `extra` is appended to the config (a Pod, say).
struct XfccGateway {
    pki: Pki,
    _proxy: RunningProxy,
    addr: std::net::SocketAddr,
}

const GATEWAY_URI: &str = "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway";

async fn xfcc_gateway(
    mode: &str,
    opts: impl FnOnce(&mut ProxyOptions),
    extra: &str,
) -> XfccGateway {
    let echo = echo_http("echo").await;
    let pki = Pki::new("xfcc");
    let (cert, key) = pki.issue(
        "gw",
        &Leaf {
            uris: vec![GATEWAY_URI.into()],
            ..leaf("x.example.com")
        },
    );
    let yaml = format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 0, protocol: HTTPS, name: https}}
    hosts: [x.example.com]
    tls: {{mode: {mode}, serverCertificate: {cert}, privateKey: {key}, caCertificates: {ca}}}
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site, namespace: istio-system}}
spec:
  hosts: [x.example.com]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: echo.internal}}}}]
{extra}"#,
        cert = cert.display(),
        key = key.display(),
        ca = pki.ca_path.display(),
        se = service_entry("echo.internal", &[echo.addr]),
    );
    let mut o = ProxyOptions::loopback(inline(&yaml));
    o.namespace = "istio-system".into();
    o.labels = [("istio".to_string(), "ingressgateway".to_string())].into();
    opts(&mut o);
    let proxy = Proxy::start(o).expect("proxy starts");
    let addr = addr(&proxy, 0);
    XfccGateway {
        pki,
        _proxy: proxy,
        addr,
    }
}

/// A client certificate with a SPIFFE URI and a DNS SAN.
fn client_leaf() -> Leaf {
    Leaf {
        uris: vec!["spiffe://cluster.local/ns/default/sa/client".into()],
        dns: vec!["client.example.com".into()],
        common_name: "client".into(),
        ..Leaf::default()
    }
}

/// curl through the gateway with `args`, printing the response headers: (status line
/// present, the XFCC the upstream saw).
async fn xfcc_seen(g: &XfccGateway, args: &[&str]) -> (String, Option<String>) {
    let mut all = vec!["-D", "-"];
    all.extend_from_slice(args);
    let (ok, out) = curl(g.addr, "x.example.com", &g.pki.ca_path, &all).await;
    assert!(ok, "{out}");
    let status = out.lines().last().unwrap_or_default().to_string();
    (status, echoed_xfcc(&out))
}

#[tokio::test]
async fn a_mutual_gateway_replaces_a_forged_xfcc_by_the_client_certificates() {
    let g = xfcc_gateway("MUTUAL", |_| {}, "").await;
    let (cert, key) = g.pki.issue("client", &client_leaf());
    let (hash, subject) = hash_and_subject(&cert).await;
    let pem: String = std::fs::read_to_string(&cert).unwrap();
    let certs = cert_args(&cert, &key);
    let forged = format!("x-forwarded-client-cert: {FORGED}");
    // The lean h1 encoder (GET), h2 downstream, and hyper's client (a request with a body).
    for how in [
        &["--http1.1"][..],
        &["--http2"][..],
        &["--http1.1", "-d", "body"][..],
    ] {
        let mut args = as_strs(&certs);
        args.extend_from_slice(how);
        args.extend_from_slice(&["-H", &forged]);
        let (status, xfcc) = xfcc_seen(&g, &args).await;
        assert!(status.starts_with("200"), "{how:?}: {status}");
        let xfcc = xfcc.unwrap_or_else(|| panic!("{how:?}: the upstream got no XFCC"));
        assert!(
            !xfcc.contains("evil"),
            "{how:?}: the forged element is gone: {xfcc}"
        );
        let pairs: Vec<&str> = xfcc.split(';').collect();
        assert_eq!(pairs.len(), 6, "{how:?}: {xfcc}");
        assert_eq!(pairs[0], format!("By={GATEWAY_URI}"));
        assert_eq!(pairs[1], format!("Hash={hash}"));
        let cert_value = pairs[2]
            .strip_prefix("Cert=\"")
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{xfcc}"));
        let strip = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(strip(&percent_decode(cert_value)), strip(&pem));
        assert_eq!(pairs[3], format!("Subject=\"{subject}\""));
        assert_eq!(pairs[4], "URI=spiffe://cluster.local/ns/default/sa/client");
        assert_eq!(pairs[5], "DNS=client.example.com");
    }
}

#[tokio::test]
async fn an_optional_mutual_gateway_sets_xfcc_only_for_a_client_with_a_certificate() {
    let g = xfcc_gateway("OPTIONAL_MUTUAL", |_| {}, "").await;
    let (cert, key) = g.pki.issue("client", &client_leaf());
    let (hash, _) = hash_and_subject(&cert).await;
    let forged = format!("x-forwarded-client-cert: {FORGED}");
    let certs = cert_args(&cert, &key);
    let mut with = as_strs(&certs);
    with.extend_from_slice(&["-H", &forged]);
    let (status, xfcc) = xfcc_seen(&g, &with).await;
    assert!(status.starts_with("200"), "{status}");
    let xfcc = xfcc.expect("XFCC with a certificate");
    assert!(
        xfcc.starts_with(&format!("By={GATEWAY_URI};Hash={hash};Cert=")),
        "{xfcc}"
    );
    for how in [&[][..], &["-d", "body"][..]] {
        let mut without = vec!["-H", &forged];
        without.extend_from_slice(how);
        let (status, xfcc) = xfcc_seen(&g, &without).await;
        assert!(status.starts_with("200"), "{status}");
        assert_eq!(
            xfcc, None,
            "{how:?}: no certificate, no XFCC (the forged one removed)"
        );
    }
}

#[tokio::test]
async fn a_plaintext_gateway_removes_a_client_sent_xfcc() {
    let echo = echo_http("echo").await;
    let proxy = start(&http_config(echo.addr, "", ""));
    let gw = addr(&proxy, 0);
    for body in [None, Some("x")] {
        let mut req = client()
            .request(
                if body.is_some() {
                    reqwest::Method::POST
                } else {
                    reqwest::Method::GET
                },
                format!("http://{gw}/"),
            )
            .header("x-forwarded-client-cert", FORGED);
        if let Some(b) = body {
            req = req.body(b);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()
                .get("x-echo-h-x-forwarded-client-cert")
                .is_none(),
            "SANITIZE_SET without a client certificate removes it ({body:?})"
        );
        // Only XFCC goes: other client headers still pass.
        assert!(r.headers().get("x-echo-h-x-request-id").is_some());
    }
    // Routes see the request as Envoy's would, the XFCC already removed: a client's forged
    // one matches no header condition.
    let matching = "\n  - name: forged\n    match: [{headers: {x-forwarded-client-cert: {prefix: \"By=\"}}}]\n    directResponse: {status: 418}";
    let proxy = start(&http_config(echo.addr, matching, ""));
    let gw = addr(&proxy, 0);
    let r = client()
        .get(format!("http://{gw}/"))
        .header("x-forwarded-client-cert", FORGED)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the forged XFCC must not match a route");
}

/// The gateway pod's annotation (the ingress gateway's own Pod) for `fccd`.
fn gateway_pod(fccd: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-1
  namespace: istio-system
  labels: {{istio: ingressgateway}}
  annotations:
    proxy.istio.io/config: '{{"gatewayTopology": {{"forwardClientCertDetails": "{fccd}"}}}}'
"#
    )
}

#[tokio::test]
async fn gateway_topology_modes_from_the_annotation_and_the_mesh_config() {
    use warden_config::proxy_config::{ForwardClientCertDetails as M, GatewayTopology};
    let mesh = |mode| {
        move |o: &mut ProxyOptions| {
            o.mesh_defaults.gateway_topology = GatewayTopology {
                num_trusted_proxies: None,
                forward_client_cert_details: Some(mode),
            }
        }
    };
    let forged = format!("x-forwarded-client-cert: {FORGED}");
    // The mesh config's APPEND_FORWARD: the client's element, then this hop's.
    let g = xfcc_gateway("MUTUAL", mesh(M::AppendForward), "").await;
    let (cert, key) = g.pki.issue("client", &client_leaf());
    let (hash, _) = hash_and_subject(&cert).await;
    let certs = cert_args(&cert, &key);
    let mut args = as_strs(&certs);
    args.extend_from_slice(&["-H", &forged]);
    for how in [&[][..], &["-d", "body"][..]] {
        let mut a = args.clone();
        a.extend_from_slice(how);
        let xfcc = xfcc_seen(&g, &a).await.1.expect("XFCC");
        assert!(
            xfcc.starts_with(&format!("{FORGED},By={GATEWAY_URI};Hash={hash};")),
            "{how:?}: {xfcc}"
        );
    }
    // The pod's annotation wins over the mesh config: FORWARD_ONLY sends the client's as it is.
    let g = xfcc_gateway(
        "MUTUAL",
        mesh(M::AppendForward),
        &gateway_pod("FORWARD_ONLY"),
    )
    .await;
    let (cert, key) = g.pki.issue("client", &client_leaf());
    let certs = cert_args(&cert, &key);
    let mut args = as_strs(&certs);
    args.extend_from_slice(&["-H", &forged]);
    assert_eq!(xfcc_seen(&g, &args).await.1.as_deref(), Some(FORGED));
    // SANITIZE: never sent on.
    let g = xfcc_gateway("MUTUAL", |_| {}, &gateway_pod("SANITIZE")).await;
    let (cert, key) = g.pki.issue("client", &client_leaf());
    let certs = cert_args(&cert, &key);
    let mut args = as_strs(&certs);
    args.extend_from_slice(&["-H", &forged]);
    assert_eq!(xfcc_seen(&g, &args).await.1, None);
    // ALWAYS_FORWARD_ONLY keeps a client's header even without a certificate.
    let g = xfcc_gateway("OPTIONAL_MUTUAL", mesh(M::AlwaysForwardOnly), "").await;
    assert_eq!(
        xfcc_seen(&g, &["-H", &forged]).await.1.as_deref(),
        Some(FORGED)
    );
    // An unknown mode in the annotation is an error naming the pod and the field.
    let echo = echo_http("echo").await;
    let yaml = format!(
        "{}{}",
        http_config(echo.addr, "", ""),
        gateway_pod("SANITISE")
    );
    let mut o = ProxyOptions::loopback(inline(&yaml));
    o.namespace = "istio-system".into();
    o.labels = [("istio".to_string(), "ingressgateway".to_string())].into();
    let err = Proxy::start(o).err().expect("refused").to_string();
    assert!(
        err.contains("Pod/istio-ingressgateway-1")
            && err.contains("forwardClientCertDetails")
            && err.contains("SANITISE"),
        "{err}"
    );
}
