//! Shared test helpers: an echo upstream (HTTP h1 + h2c, and TCP), YAML builders and a proxy
//! started in-process on loopback.
#![allow(dead_code)]

pub mod kube_dump;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};

/// A running echo upstream; the task stops when the test's runtime ends.
pub struct Echo {
    pub addr: SocketAddr,
}

type EchoBody = BoxBody<Bytes, hyper::Error>;

/// HTTP echo: returns the request body as the response body and describes the request in
/// `x-echo-*` headers. A path containing `/status/N` answers N; `/delay/MS` waits first.
pub async fn echo_http(name: &'static str) -> Echo {
    echo_http_on(name, ([127, 0, 0, 1], 0).into()).await
}

/// [`echo_http`] on a given address (a pod's own loopback IP and port, for YAML that names
/// them).
pub async fn echo_http_on(name: &'static str, at: SocketAddr) -> Echo {
    let listener = TcpListener::bind(at).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| echo_handler(name, req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Echo { addr }
}

async fn echo_handler(
    name: &'static str,
    req: Request<Incoming>,
) -> Result<Response<EchoBody>, Infallible> {
    let path = req.uri().path().to_string();
    let number_after = |marker: &str| -> Option<u64> {
        let rest = &path[path.find(marker)? + marker.len()..];
        rest.split('/').next()?.parse().ok()
    };
    if let Some(ms) = number_after("/delay/") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let status = number_after("/status/")
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut builder = Response::builder()
        .status(status)
        .header("x-upstream", name)
        .header("x-echo-method", req.method().as_str())
        .header(
            "x-echo-path",
            req.uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/"),
        )
        .header("x-echo-version", format!("{:?}", req.version()));
    for (h, v) in req.headers() {
        builder = builder.header(format!("x-echo-h-{h}"), v.clone());
    }
    let body = req.into_body().boxed();
    Ok(builder.body(body).unwrap())
}

/// An upstream that accepts nothing: a bound port with no listener.
pub async fn closed_port() -> ClosedPort {
    // Bound but never listening: connects are refused, and while the socket lives no other
    // socket gets the port (a freed port could be rebound by a parallel test, or taken as a
    // source port and connect to itself).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    ClosedPort(socket)
}

/// A loopback port nothing listens on, held for the guard's lifetime.
pub struct ClosedPort(tokio::net::TcpSocket);

impl ClosedPort {
    pub fn addr(&self) -> SocketAddr {
        self.0.local_addr().unwrap()
    }
}

/// TCP echo with half-close: echoes bytes, and after the client's EOF writes `bye` and closes.
pub async fn echo_tcp() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.write_all(b"bye").await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// Gateway `gw` with one server per (port, protocol), hosts `*`.
pub fn gateway(servers: &[(u16, &str)]) -> String {
    let mut y = String::from(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\nspec:\n  servers:\n",
    );
    for (port, proto) in servers {
        y.push_str(&format!(
            "  - port: {{number: {port}, protocol: {proto}, name: {}-{port}}}\n    hosts: [\"*\"]\n",
            proto.to_lowercase()
        ));
    }
    y
}

/// A Gateway `gw` on one free HTTP port and the head of a VirtualService `vs` bound to it, up to
/// its `http:` key: append the route entries.
pub fn gateway_and_route_head() -> String {
    format!(
        "{}\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n",
        gateway(&[(0, "HTTP")])
    )
}

/// `warden echo` (HTTP only, counting requests per source IP) on a free loopback port.
pub async fn counting_echo() -> warden_load::echo::EchoServer {
    warden_load::echo::EchoServer::start(warden_load::echo::EchoConfig {
        http: Some(([127, 0, 0, 1], 0).into()),
        tcp: None,
    })
    .await
    .unwrap()
}

/// One HTTP listener (config port 0) whose VirtualService `site` has `extra_route` entries
/// first, then routes everything to `up` (as `echo.internal`); followed by `policies`.
pub fn http_config(up: SocketAddr, extra_route: &str, policies: &str) -> String {
    format!(
        r#"{gw}
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:{extra_route}
  - name: all
    route: [{{destination: {{host: echo.internal}}}}]
{policies}"#,
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[up]),
    )
}

/// A STATIC ServiceEntry for `host` on port 80 with the given endpoints.
pub fn service_entry(host: &str, endpoints: &[SocketAddr]) -> String {
    let mut y = format!(
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {}\nspec:\n  hosts: [{host}]\n  resolution: STATIC\n  ports:\n  - {{number: 80, name: http, protocol: HTTP}}\n  endpoints:\n",
        host.replace('.', "-")
    );
    for e in endpoints {
        y.push_str(&format!(
            "  - address: {}\n    ports: {{http: {}}}\n",
            e.ip(),
            e.port()
        ));
    }
    if endpoints.is_empty() {
        y.push_str("  []\n");
        y = y.replace("endpoints:\n  []", "endpoints: []");
    }
    y
}

/// Start a proxy on loopback from inline YAML (one worker, admin on a free port).
pub fn start(yaml: &str) -> RunningProxy {
    Proxy::start(ProxyOptions::loopback(inline(yaml))).expect("proxy starts")
}

pub fn inline(yaml: &str) -> ConfigSource {
    ConfigSource::Inline {
        name: "test.yaml".into(),
        text: yaml.into(),
    }
}

/// The address of the proxy's listener for config port `port`.
pub fn addr(p: &RunningProxy, port: u16) -> SocketAddr {
    p.listener_addr(port).expect("listener for port")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(8)
        .build()
        .unwrap()
}

pub fn h2_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

/// Send raw bytes and read until the server closes or `wait` passes; returns the text.
pub async fn raw(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A hand-written HTTP/1.1 upstream on keep-alive connections: for every request head it
/// reads (requests carry no body), it writes what `answer(head)` returns, byte for byte.
pub async fn raw_upstream(answer: fn(&str) -> Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        if s.write_all(&answer(&head)).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// Byte `i` of a test body made of `chunk`-sized runs: `(i / chunk) % 251`.
pub fn patterned(len: usize, chunk: usize) -> Vec<u8> {
    (0..len).map(|i| ((i / chunk) % 251) as u8).collect()
}

/// Read a response body to its end, checking it is [`patterned`] with runs of `chunk`;
/// returns its length.
pub async fn read_patterned(resp: reqwest::Response, chunk: usize) -> usize {
    use futures_util::StreamExt;
    let mut total = 0usize;
    let mut stream = resp.bytes_stream();
    while let Some(piece) = stream.next().await {
        let piece = piece.unwrap();
        for (k, b) in piece.iter().enumerate() {
            let i = (total + k) / chunk;
            assert_eq!(*b, (i % 251) as u8, "byte {} differs", total + k);
        }
        total += piece.len();
    }
    total
}

pub fn empty() -> Empty<Bytes> {
    Empty::new()
}

/// A ServiceEntry `tcp.internal` (port 9000 -> `upstream_port`) and a VirtualService routing
/// every TCP connection of gateway `gw` to it, as YAML documents (leading `---`).
pub fn tcp_route(upstream_port: u16) -> String {
    format!(
        r#"---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: tcp-echo}}
spec:
  hosts: [tcp.internal]
  resolution: STATIC
  ports: [{{number: 9000, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {upstream_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: tcp}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - route: [{{destination: {{host: tcp.internal, port: {{number: 9000}}}}}}]
"#
    )
}

/// What a [`recording_upstream`] received: every complete request (head and body, as bytes on
/// the wire) and every connection's raw bytes, complete requests or not.
#[derive(Default)]
pub struct Received {
    pub requests: Vec<String>,
    pub connections: Vec<Vec<u8>>,
}

pub type Recording = std::sync::Arc<std::sync::Mutex<Received>>;

/// An HTTP/1.1 upstream that records what reaches it and answers `200 ok` to every complete
/// request (Content-Length or chunked bodies, read to their end).
pub async fn recording_upstream() -> (SocketAddr, Recording) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Recording::default();
    let recording = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            let slot = {
                let mut r = seen.lock().unwrap();
                r.connections.push(Vec::new());
                r.connections.len() - 1
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    while let Some(len) = complete_request(&buf) {
                        let request = String::from_utf8_lossy(&buf[..len]).into_owned();
                        buf.drain(..len);
                        seen.lock().unwrap().requests.push(request);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            seen.lock().unwrap().connections[slot].extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            });
        }
    });
    (addr, recording)
}

/// The length of the complete request at the start of `buf` (head plus a Content-Length or
/// chunked body), if there is one.
fn complete_request(buf: &[u8]) -> Option<usize> {
    let head = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    let header = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    if header("transfer-encoding:").is_some_and(|v| v.ends_with("chunked")) {
        let end = buf[head..].windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head + end + 5);
    }
    let length: usize = header("content-length:").map_or(Some(0), |v| v.parse().ok())?;
    (buf.len() >= head + length).then_some(head + length)
}

/// The `host` lines of a request as an upstream received it.
pub fn host_lines(request: &str) -> Vec<String> {
    request
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
        .map(|l| l[5..].trim().to_string())
        .collect()
}

/// Send `request` on a fresh connection and read the first response (head, and a
/// Content-Length body); its status code, 0 if none came within 3 s.
pub async fn first_status(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    return;
                }
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), read).await;
    String::from_utf8_lossy(&buf)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A leaf certificate for `name` (its CN and DNS SAN).
pub fn leaf(name: &str) -> warden_testkit::pki::Leaf {
    warden_testkit::pki::Leaf {
        common_name: name.into(),
        dns: vec![name.into()],
        ..warden_testkit::pki::Leaf::default()
    }
}

/// A TLS server on loopback answering every connection with an HTTP response naming itself
/// (the PASSTHROUGH backend), optionally requiring client certificates.
pub async fn tls_backend(pki: &warden_testkit::pki::Pki, name: &str) -> std::net::SocketAddr {
    let (cert, key) = pki.issue(
        name,
        &warden_testkit::pki::Leaf {
            loopback_ip: true,
            ..leaf(name)
        },
    );
    let spec = warden_tls::server::ServerSpec {
        cert,
        key,
        alpn: vec![b"http/1.1".to_vec()],
        ..Default::default()
    };
    let config = warden_tls::server::server_config(&spec, std::time::SystemTime::now()).unwrap();
    let acceptor = warden_tls::tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let body = format!("backend {name}");
                let _ = tls
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

/// Run a command to its end; (success, stdout + stderr).
pub async fn run(program: &str, args: Vec<String>) -> (bool, String) {
    let program = program.to_string();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&program)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

/// A TLS client trusting the CA bundle at `ca`.
pub fn client_config(ca: &std::path::Path) -> std::sync::Arc<warden_tls::rustls::ClientConfig> {
    let mut roots = warden_tls::rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in warden_tls::rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: warden_tls::rustls::pki_types::CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    std::sync::Arc::new(
        warden_tls::rustls::ClientConfig::builder_with_provider(warden_tls::provider::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
