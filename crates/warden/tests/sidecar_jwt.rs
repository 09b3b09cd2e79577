//! istio.io's "Authorization with JWT" task (authz-jwt) on a sidecar's inbound side, as a user
//! runs it: two pods (network namespaces) with capture and sidecars, the server pod being the
//! task's httpbin in `foo`, the task's YAML unchanged (crates/warden-proxy's fixtures, see their
//! NOTICE). The jwksUri host is a ServiceEntry whose endpoint is nginx serving Istio's
//! `jwks.json` over HTTPS from a third namespace; the sidecars trust its test CA through
//! `SSL_CERT_FILE`, the system roots' override. A test binary of its own: that variable is
//! process-wide. Skips, saying why, where pods cannot be made.

mod common;

use common::pods::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::Nginx;

const JWKS_PORT: u16 = 8443;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../warden-proxy/tests/fixtures/istio-jwt")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The task's cluster as `kubectl get -o yaml` lists it: httpbin (Service, EndpointSlice, Pod)
/// in `foo`, the sleep client pod, and raw.githubusercontent.com as a ServiceEntry on nginx.
fn cluster() -> String {
    let httpbin_and_sleep = httpbin_and_sleep();
    format!(
        r#"{httpbin_and_sleep}---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: github-raw, namespace: istio-system}}
spec:
  hosts: [raw.githubusercontent.com]
  ports: [{{number: 443, name: https, protocol: TLS}}]
  resolution: STATIC
  endpoints: [{{address: {OUTSIDER_IP}, ports: {{https: {JWKS_PORT}}}}}]
"#
    )
}

fn with_docs(docs: &[&str]) -> String {
    let mut yaml = cluster();
    for d in docs {
        yaml.push_str("\n---\n");
        yaml.push_str(&fixture(d));
    }
    yaml
}

/// The status the sleep pod gets for `GET /headers` on httpbin's service, with `token`.
fn code(client: &Pod, token: Option<&str>) -> u16 {
    let auth = token.map(|t| format!("Bearer {}", t.trim()));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let vip = format!("{VIP}:8000");
    client
        .ns
        .run_in(|| request_with(&vip, "GET", "/headers", "httpbin.foo:8000", &headers, b""))
        .unwrap()
        .unwrap()
        .status
}

/// Until the server's sidecar has fetched the keys (a token stops getting 401), at most 10 s.
fn keys_fetched(client: &Pod, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while code(client, Some(token)) == 401 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn authorization_with_jwt_task_on_a_sidecar_pod_pair() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let pki = Pki::new("github");
    let (cert, key) = pki.issue(
        "raw",
        &Leaf {
            common_name: "raw.githubusercontent.com".into(),
            dns: vec!["raw.githubusercontent.com".into()],
            ..Leaf::default()
        },
    );
    let www = dir
        .path()
        .join("www/istio/istio/release-1.8/security/tools/jwt/samples");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("jwks.json"), fixture("jwks.json")).unwrap();
    let servers = format!(
        "server {{ listen {{listen}} ssl; ssl_certificate {}; ssl_certificate_key {}; root {}; }}",
        cert.display(),
        key.display(),
        dir.path().join("www").display()
    );
    let at: SocketAddr = format!("{OUTSIDER_IP}:{JWKS_PORT}").parse().unwrap();
    let _nginx = outsider
        .run_in(|| Nginx::start_at(at, &servers, 64))
        .unwrap()
        .expect("nginx starts in the outsider namespace");
    // The sidecars (uid 1337) read the CA from the test's folder.
    let ca = dir
        .write("roots.pem", &std::fs::read_to_string(&pki.ca_path).unwrap())
        .unwrap();
    std::env::set_var("SSL_CERT_FILE", &ca);

    let config = dir
        .write(
            "mesh.yaml",
            &with_docs(&["authz-jwt-request-authentication.yaml"]),
        )
        .unwrap();
    server.start_sidecar(&config, SERVER_IP, "app=httpbin", &["--namespace", "foo"]);
    client.start_sidecar(&config, CLIENT_IP, "app=sleep", &["--namespace", "foo"]);
    let demo = fixture("demo.jwt");
    let group = fixture("groups-scope.jwt");

    // "Allow requests with valid JWT and list-typed claims": an invalid token is refused,
    // no token passes.
    keys_fetched(&client, &demo);
    assert_eq!(code(&client, Some("invalidToken")), 401);
    assert_eq!(code(&client, None), 200);
    assert_eq!(code(&client, Some(&demo)), 200);

    // require-jwt: only the demo token's principal.
    std::fs::write(
        &config,
        with_docs(&[
            "authz-jwt-request-authentication.yaml",
            "authz-jwt-require-jwt.yaml",
        ]),
    )
    .unwrap();
    server.reload_sidecar();
    keys_fetched(&client, &demo);
    assert_eq!(code(&client, Some(&demo)), 200);
    assert_eq!(code(&client, None), 403);

    // require-jwt with the groups claim: the group token only.
    std::fs::write(
        &config,
        with_docs(&[
            "authz-jwt-request-authentication.yaml",
            "authz-jwt-require-jwt-groups.yaml",
        ]),
    )
    .unwrap();
    server.reload_sidecar();
    keys_fetched(&client, &group);
    assert_eq!(code(&client, Some(&group)), 200);
    assert_eq!(code(&client, Some(&demo)), 403);
    assert_eq!(code(&client, None), 403);
}
