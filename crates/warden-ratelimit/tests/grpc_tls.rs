//! gRPC server TLS and mutual TLS (`GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`/`_KEY`,
//! `GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN`) over TCP and over a unix socket
//! (`GRPC_UDS`), and certificate rotation while calls go on. Clients are real TLS + HTTP/2
//! connections to the running service.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite};
use warden_ratelimit::grpc_client::{self, SHOULD_RATE_LIMIT};
use warden_ratelimit::settings::GrpcTlsSettings;
use warden_ratelimit::{RateLimitResponse, Settings};
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::TempDir;
use warden_tls::client::{client_config, ClientSpec};
use warden_tls::rustls::pki_types::ServerName;
use warden_tls::rustls::ClientConfig;
use warden_tls::tokio_rustls::TlsConnector;

const CONFIG: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";
const CLIENT_SAN: &str = "ratelimit-client.example";

enum Target {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

struct Certs {
    pki: Pki,
    server_cert: PathBuf,
    server_key: PathBuf,
}

fn certs() -> Certs {
    let pki = Pki::new("grpc");
    let (server_cert, server_key) = pki.issue(
        "server",
        &Leaf {
            common_name: "ratelimit".into(),
            dns: vec!["localhost".into()],
            loopback_ip: true,
            ..Leaf::default()
        },
    );
    Certs {
        pki,
        server_cert,
        server_key,
    }
}

fn tls_settings(c: &Certs, mutual: bool) -> GrpcTlsSettings {
    GrpcTlsSettings {
        cert: c.server_cert.clone(),
        key: c.server_key.clone(),
        client_ca: mutual.then(|| c.pki.ca_path.clone()),
        client_san: mutual.then(|| CLIENT_SAN.to_owned()),
    }
}

/// A client config trusting `ca`, presenting `cert_key` when given.
fn client(ca: &Path, cert_key: Option<(PathBuf, PathBuf)>) -> Arc<ClientConfig> {
    client_config(
        &ClientSpec {
            ca: Some(ca.to_path_buf()),
            cert_key,
            alpn: vec![b"h2".to_vec()],
            ..ClientSpec::default()
        },
        SystemTime::now(),
    )
    .expect("client config")
}

fn client_cert(pki: &Pki, file: &str, san: &str) -> (PathBuf, PathBuf) {
    pki.issue(
        file,
        &Leaf {
            common_name: "client".into(),
            dns: vec![san.into()],
            ..Leaf::default()
        },
    )
}

/// One ShouldRateLimit call on a new connection; also returns the server's leaf certificate.
async fn call_on(
    target: &Target,
    tls: Option<Arc<ClientConfig>>,
) -> Result<(RateLimitResponse, Option<Vec<u8>>), String> {
    match target {
        Target::Tcp(addr) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            call_over(s, tls).await
        }
        Target::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| e.to_string())?;
            call_over(s, tls).await
        }
    }
}

async fn call_over<S>(
    stream: S,
    tls: Option<Arc<ClientConfig>>,
) -> Result<(RateLimitResponse, Option<Vec<u8>>), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match tls {
        None => Ok((h2_call(stream).await?, None)),
        Some(config) => {
            let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
            let tls = TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            let leaf = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec());
            Ok((h2_call(tls).await?, leaf))
        }
    }
}

async fn h2_call<S>(io: S) -> Result<RateLimitResponse, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io)
        .await
        .map_err(|e| format!("h2: {e}"))?;
    tokio::spawn(conn);
    let uri = grpc_client::method_uri(&"localhost".parse().expect("authority"), SHOULD_RATE_LIMIT);
    let request = req("d", vec![desc(&[("k", "v")])]);
    let call = grpc_client::unary::<_, RateLimitResponse>(send, &uri, &request);
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| format!("grpc: {e}"))
}

async fn start_tls(tls: Option<GrpcTlsSettings>, uds: Option<PathBuf>) -> (Booted, Target) {
    let h = boot(|s: &mut Settings| {
        s.grpc_tls = tls;
        s.grpc_uds = uds;
    })
    .await;
    let target = match h.server.grpc_uds() {
        Some(p) => Target::Unix(p.to_path_buf()),
        None => Target::Tcp(h.server.grpc_addr()),
    };
    (h, target)
}

/// `common::start_with` connects a plain-text tonic client; with TLS that connection fails,
/// so these tests start the server themselves.
async fn boot(tweak: impl FnOnce(&mut Settings)) -> Booted {
    let dir = TempDir::new("rls").expect("temp dir");
    dir.write("config.yaml", CONFIG).expect("write config");
    let mut s = settings(&dir, None);
    tweak(&mut s);
    let server = warden_ratelimit::Server::start(s).await.expect("start");
    Booted { server, _dir: dir }
}

struct Booted {
    server: warden_ratelimit::RunningServer,
    _dir: TempDir,
}

fn ok(result: Result<(RateLimitResponse, Option<Vec<u8>>), String>) -> Option<Vec<u8>> {
    let (response, leaf) = result.expect("call accepted");
    assert_eq!(response.overall_code, OK);
    leaf
}

async fn mutual_tls_on(uds: Option<PathBuf>) {
    let c = certs();
    let (_h, target) = start_tls(Some(tls_settings(&c, true)), uds).await;
    let good = client_cert(&c.pki, "client", CLIENT_SAN);
    ok(call_on(&target, Some(client(&c.pki.ca_path, Some(good)))).await);

    // No certificate, a certificate without the SAN, one from another CA, no TLS: refused.
    let refused = |r: Result<_, String>, what: &str| {
        assert!(r.is_err(), "{what} must be refused");
    };
    refused(
        call_on(&target, Some(client(&c.pki.ca_path, None))).await,
        "no client certificate",
    );
    let wrong_san = client_cert(&c.pki, "other", "someone-else.example");
    refused(
        call_on(&target, Some(client(&c.pki.ca_path, Some(wrong_san)))).await,
        "a certificate without GRPC_CLIENT_TLS_SAN",
    );
    let stranger = Pki::new("stranger");
    let foreign = client_cert(&stranger, "foreign", CLIENT_SAN);
    refused(
        call_on(&target, Some(client(&c.pki.ca_path, Some(foreign)))).await,
        "a certificate of another CA",
    );
    refused(call_on(&target, None).await, "plain text");
    // Still serving after the refusals.
    let good = client_cert(&c.pki, "client2", CLIENT_SAN);
    ok(call_on(&target, Some(client(&c.pki.ca_path, Some(good)))).await);
}

#[tokio::test]
async fn mutual_tls_over_tcp() {
    mutual_tls_on(None).await;
}

#[tokio::test]
async fn mutual_tls_over_a_unix_socket() {
    let dir = TempDir::new("uds").expect("dir");
    mutual_tls_on(Some(dir.path().join("ratelimit.sock"))).await;
}

#[tokio::test]
async fn server_tls_without_client_certificates() {
    let c = certs();
    let (_h, target) = start_tls(Some(tls_settings(&c, false)), None).await;
    ok(call_on(&target, Some(client(&c.pki.ca_path, None))).await);
    assert!(call_on(&target, None).await.is_err(), "plain text refused");
}

#[tokio::test]
async fn plain_grpc_over_a_unix_socket() {
    let dir = TempDir::new("uds").expect("dir");
    let path = dir.path().join("rls.sock");
    // A socket file left behind by an earlier run does not stop the start.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    let (h, target) = start_tls(None, Some(path.clone())).await;
    ok(call_on(&target, None).await);
    h.server.shutdown().await;
    assert!(!path.exists(), "the socket file is removed at shutdown");
}

fn der(path: &Path) -> Vec<u8> {
    warden_tls::pem_files::read_chain(path, SystemTime::now()).expect("chain")[0].to_vec()
}

/// The certificate and key are replaced (non-atomically: the certificate first, so the pair
/// is inconsistent for a moment) five times while a client makes calls, each on a new
/// connection, and another client keeps one connection: no call fails, and after each
/// rotation new connections get the new certificate.
#[tokio::test]
async fn certificate_rotation_without_a_failed_call() {
    let c = certs();
    let (_h, target) = start_tls(Some(tls_settings(&c, true)), None).await;
    let target = Arc::new(target);
    let client_cfg = client(
        &c.pki.ca_path,
        Some(client_cert(&c.pki, "client", CLIENT_SAN)),
    );

    // One long-lived connection, used before and after the rotations.
    let Target::Tcp(addr) = *target else {
        unreachable!()
    };
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let tls = TlsConnector::from(client_cfg.clone())
        .connect(ServerName::try_from("localhost").expect("name"), stream)
        .await
        .expect("handshake");
    let (long_lived, conn) = h2::client::handshake(tls).await.expect("h2");
    tokio::spawn(conn);
    let uri = grpc_client::method_uri(&"localhost".parse().expect("authority"), SHOULD_RATE_LIMIT);
    let request = req("d", vec![desc(&[("k", "v")])]);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let caller = {
        let (target, cfg) = (target.clone(), client_cfg.clone());
        tokio::spawn(async move {
            let (mut calls, mut failures) = (0u32, Vec::new());
            // Bounded: at most 2000 calls.
            while !*stop_rx.borrow() && calls < 2000 {
                if let Err(e) = call_on(&target, Some(cfg.clone())).await {
                    failures.push(e);
                }
                calls += 1;
            }
            (calls, failures)
        })
    };
    for round in 0..5 {
        let (cert, key) = c.pki.issue_pem(&Leaf {
            common_name: format!("ratelimit-{round}"),
            dns: vec!["localhost".into()],
            ..Leaf::default()
        });
        std::fs::write(&c.server_cert, cert).expect("write cert");
        tokio::time::sleep(Duration::from_millis(30)).await;
        std::fs::write(&c.server_key, key).expect("write key");
        let want = der(&c.server_cert);
        eventually(
            "new connections get the new certificate",
            Duration::from_secs(5),
            async || {
                call_on(&target, Some(client_cfg.clone()))
                    .await
                    .ok()
                    .and_then(|(_, leaf)| leaf)
                    .is_some_and(|leaf| leaf == want)
            },
        )
        .await;
    }
    let _ = stop_tx.send(true);
    let (calls, failures) = caller.await.expect("caller");
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed: {failures:?}",
        failures.len()
    );
    assert!(calls > 0);
    let answer: RateLimitResponse = grpc_client::unary(long_lived, &uri, &request)
        .await
        .expect("the connection made before the rotations still works");
    assert_eq!(answer.overall_code, OK);
}

#[test]
fn settings_from_the_reference_variables() {
    let vars = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let s = Settings::from_env_map(&vars(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.example"),
        ("GRPC_UDS", "/var/run/ratelimit.sock"),
    ]))
    .expect("settings");
    assert_eq!(
        s.grpc_tls,
        Some(GrpcTlsSettings {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            client_ca: Some("/certs/ca.crt".into()),
            client_san: Some("envoy.example".into()),
        })
    );
    assert_eq!(s.grpc_uds, Some(PathBuf::from("/var/run/ratelimit.sock")));
    let err = Settings::from_env_map(&vars(&[("GRPC_SERVER_USE_TLS", "true")]))
        .expect_err("files required");
    assert!(err.to_string().contains("GRPC_SERVER_TLS_CERT"), "{err}");
}
