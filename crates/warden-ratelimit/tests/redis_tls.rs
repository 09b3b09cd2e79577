//! TLS to Redis (`REDIS_TLS`, `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`/`_KEY`,
//! `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`) against a real redis-server with certificates the
//! test makes: the chain and, unless skipped, the name are verified; the server may require a
//! client certificate.

mod common;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use std::collections::HashMap;
use std::time::Duration;
use warden_ratelimit::{Server, Settings};
use warden_testkit::{RedisServer, TempDir};

const CONFIG: &str = "domain: t
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// The PEM files of one test: a CA, a server certificate for `localhost` only (no IP SAN), a
/// client certificate from the same CA, and a CA that signed none of them.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = TempDir::new("redis-tls").unwrap();
        let ca_params = |name: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name
                .push(rcgen::DnType::CommonName, name.to_owned());
            p
        };
        let ca =
            CertifiedIssuer::self_signed(ca_params("warden test CA"), KeyPair::generate().unwrap())
                .unwrap();
        let other_ca =
            CertifiedIssuer::self_signed(ca_params("another CA"), KeyPair::generate().unwrap())
                .unwrap();
        let leaf = |names: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(vec!["localhost".into()]);
        let (client_cert, client_key) = leaf(vec!["warden-client".into()]);
        for (name, text) in [
            ("ca.pem", ca.pem()),
            ("other-ca.pem", other_ca.pem()),
            ("server.pem", server_cert),
            ("server.key", server_key),
            ("client.pem", client_cert),
            ("client.key", client_key),
        ] {
            dir.write(name, &text).unwrap();
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A redis-server with a TLS port (clients must present a certificate from the CA) next to
/// its plain one (the guard's readiness check).
fn tls_redis(pki: &Pki) -> (RedisServer, u16) {
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = RedisServer::start_with_args(
            [
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &pki.path("server.pem"),
                "--tls-key-file",
                &pki.path("server.key"),
                "--tls-ca-cert-file",
                &pki.path("ca.pem"),
                "--tls-auth-clients",
                "yes",
            ]
            .map(String::from)
            .to_vec(),
        );
        if let Ok(server) = server {
            return (server, port);
        }
    }
    panic!("redis-server with TLS did not start");
}

fn settings(dir: &TempDir, vars: &[(&str, String)]) -> Settings {
    let mut env: HashMap<String, String> = [
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_TLS", "true".into()),
        ("REDIS_TIMEOUT", "1s".into()),
        ("HOST", "127.0.0.1".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_PORT", "0".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in vars {
        env.insert(k.to_string(), v.clone());
    }
    let mut s = Settings::from_env_map(&env).expect("settings");
    s.config_source = warden_ratelimit::ConfigSource::Paths(vec![dir.path().to_path_buf()]);
    s
}

/// The service with `vars`, one call, its result.
async fn one_call(vars: &[(&str, String)]) -> Result<u32, String> {
    let dir = TempDir::new("tls-config").unwrap();
    dir.write("t.yaml", CONFIG).unwrap();
    let server = Server::start(settings(&dir, vars))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
        format!("http://{}", server.grpc_addr()),
    )
    .await
    .unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        client.should_rate_limit(req("t", vec![desc(&[("k", "v")])])),
    )
    .await
    .map_err(|_| "call timed out".to_string())?
    .map(|r| r.into_inner().statuses[0].limit_remaining)
    .map_err(|e| e.message().to_owned());
    server.shutdown().await;
    result
}

#[tokio::test]
async fn mutual_tls_with_a_verified_name_and_chain() {
    let pki = Pki::new();
    let (_redis, port) = tls_redis(&pki);
    let ca = ("REDIS_TLS_CACERT", pki.path("ca.pem"));
    let cert = ("REDIS_TLS_CLIENT_CERT", pki.path("client.pem"));
    let key = ("REDIS_TLS_CLIENT_KEY", pki.path("client.key"));
    let by_name = ("REDIS_URL", format!("localhost:{port}"));
    let by_ip = ("REDIS_URL", format!("127.0.0.1:{port}"));
    let skip = ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true".to_string());

    // The name matches the certificate, the chain is the CA's, the client shows its own.
    let all = [by_name.clone(), ca.clone(), cert.clone(), key.clone()];
    assert_eq!(one_call(&all).await, Ok(99));
    assert_eq!(one_call(&all).await, Ok(98), "counted in the same Redis");

    // The server asks for a client certificate.
    let no_client_cert = [by_name.clone(), ca.clone()];
    let err = one_call(&no_client_cert).await.unwrap_err();
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    // 127.0.0.1 is not a name of the certificate: refused unless names are not checked.
    let wrong_name = [by_ip.clone(), ca.clone(), cert.clone(), key.clone()];
    let err = one_call(&wrong_name).await.unwrap_err();
    assert!(err.contains("certificate"), "{err}");
    let skipped = [
        by_ip.clone(),
        ca.clone(),
        cert.clone(),
        key.clone(),
        skip.clone(),
    ];
    assert_eq!(one_call(&skipped).await, Ok(97));

    // Skipping the name still verifies the chain.
    let untrusted = [
        by_ip,
        ("REDIS_TLS_CACERT", pki.path("other-ca.pem")),
        cert.clone(),
        key.clone(),
        skip,
    ];
    let err = one_call(&untrusted).await.unwrap_err();
    assert!(err.contains("certificate"), "{err}");

    // A missing file fails at startup, as in the reference.
    let missing = [
        by_name,
        ("REDIS_TLS_CACERT", pki.path("nope.pem")),
        cert,
        key,
    ];
    let err = one_call(&missing).await.unwrap_err();
    assert!(err.starts_with("start: "), "{err}");
}
