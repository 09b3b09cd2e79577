//! istio.io's "JWT authentication" (authn-policy, end-user part) and "Authorization with JWT"
//! (authz-jwt) tasks on the gateway, their YAML as published (`fixtures/istio-jwt/`, see its
//! NOTICE) but for the Gateway's port 80, moved to a free port. The jwksUri host,
//! raw.githubusercontent.com, is a ServiceEntry of the mesh whose endpoint is a local nginx
//! serving Istio's published `jwks.json` over HTTPS (a test CA, the proxy's mesh CA), as Istio
//! points Envoy's JWKS fetch at the mesh's cluster for that host; the tokens are Istio's
//! published `demo.jwt` and `groups-scope.jwt`. The tasks' workload, httpbin, is an echo
//! upstream behind the Service the task's sample defines.

mod common;

use common::*;
use std::path::Path;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::Nginx;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/istio-jwt")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// What the tasks' cluster has besides the task YAML: httpbin's Service in `foo` over the echo
/// upstream, and raw.githubusercontent.com as a ServiceEntry on the local nginx.
fn cluster(echo: std::net::SocketAddr, nginx_port: u16) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: httpbin, namespace: foo, labels: {{app: httpbin}}}}
spec:
  ports: [{{name: http, port: 8000, targetPort: {}}}]
  selector: {{app: httpbin}}
---
apiVersion: v1
kind: Pod
metadata: {{name: httpbin-1, namespace: foo, labels: {{app: httpbin}}}}
status: {{podIP: "{}"}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: github-raw, namespace: istio-system}}
spec:
  hosts: [raw.githubusercontent.com]
  ports: [{{number: 443, name: https, protocol: TLS}}]
  resolution: STATIC
  endpoints: [{{address: 127.0.0.1, ports: {{https: {nginx_port}}}}}]
"#,
        echo.port(),
        echo.ip()
    )
}

struct Env {
    _pki: Pki,
    _nginx: Nginx,
    mesh: warden_testkit::TempDir,
    _www: warden_testkit::TempDir,
    base_yaml: String,
}

async fn env() -> Env {
    let pki = Pki::new("github");
    let (cert, key) = pki.issue(
        "raw",
        &Leaf {
            common_name: "raw.githubusercontent.com".into(),
            dns: vec!["raw.githubusercontent.com".into()],
            ..Leaf::default()
        },
    );
    let mesh = warden_testkit::TempDir::new("jwt-task-mesh").unwrap();
    std::fs::copy(&pki.ca_path, mesh.path().join("ca.crt")).unwrap();
    let www = warden_testkit::TempDir::new("jwt-task-www").unwrap();
    for branch in ["master", "release-1.8"] {
        let dir = www
            .path()
            .join(format!("istio/istio/{branch}/security/tools/jwt/samples"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("jwks.json"), fixture("jwks.json")).unwrap();
    }
    let nginx = Nginx::start(&format!(
        "server {{ listen {{listen}} ssl; ssl_certificate {}; ssl_certificate_key {}; root {}; }}",
        cert.display(),
        key.display(),
        www.path().display()
    ))
    .expect("nginx starts");
    let echo = echo_http("httpbin").await;
    let port = warden_testkit::free_port().unwrap();
    let gateway =
        fixture("authn-policy-gateway.yaml").replace("number: 80\n", &format!("number: {port}\n"));
    let base_yaml = format!(
        "{gateway}\n---\n{}",
        cluster(echo.addr, nginx.addr().port())
    );
    Env {
        _pki: pki,
        _nginx: nginx,
        mesh,
        _www: www,
        base_yaml,
    }
}

/// The ingress gateway (istio-system, `istio=ingressgateway`) or, for authz-jwt, a proxy for
/// httpbin's workload (`foo`, `app=httpbin`), with `docs` applied.
fn proxy(env: &Env, namespace: &str, label: (&str, &str), docs: &[&str]) -> RunningProxy {
    let mut yaml = env.base_yaml.clone();
    for d in docs {
        yaml.push_str("\n---\n");
        yaml.push_str(&fixture(d));
    }
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.namespace = namespace.into();
    opts.labels.insert(label.0.into(), label.1.into());
    opts.mesh = Some(warden_proxy::core::identity::MeshCredentials {
        dir: env.mesh.path().to_path_buf(),
        trust_domain: "cluster.local".into(),
    });
    Proxy::start(opts).expect("proxy starts")
}

async fn code(p: &RunningProxy, path: &str, token: Option<&str>) -> u16 {
    let port = p.listeners().into_iter().next().expect("a listener").addr;
    let mut r = client().get(format!("http://{port}{path}"));
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {}", t.trim()));
    }
    r.send().await.unwrap().status().as_u16()
}

/// The first answer to a token request once the keys are fetched (at most 10 s).
async fn ready(p: &RunningProxy, token: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while code(p, "/headers", Some(token)).await == 401 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_authentication_task_on_the_gateway() {
    let env = env().await;
    let demo = fixture("demo.jwt");
    let gw = ("istio", "ingressgateway");
    let ns = "istio-system";

    // Before any policy: 200.
    let p = proxy(&env, ns, gw, &[]);
    assert_eq!(code(&p, "/headers", None).await, 200);
    drop(p);

    // RequestAuthentication: no token 200, an invalid one 401, demo.jwt 200.
    let p = proxy(&env, ns, gw, &["authn-policy-request-authentication.yaml"]);
    ready(&p, &demo).await;
    assert_eq!(code(&p, "/headers", None).await, 200);
    assert_eq!(code(&p, "/headers", Some("deadbeef")).await, 401);
    assert_eq!(code(&p, "/headers", Some(&demo)).await, 200);
    drop(p);

    // Require a valid token: without one 403.
    let p = proxy(
        &env,
        ns,
        gw,
        &[
            "authn-policy-request-authentication.yaml",
            "authn-policy-require-token.yaml",
        ],
    );
    ready(&p, &demo).await;
    assert_eq!(code(&p, "/headers", None).await, 403);
    assert_eq!(code(&p, "/headers", Some(&demo)).await, 200);
    drop(p);

    // Per path: /headers needs one, /ip does not.
    let p = proxy(
        &env,
        ns,
        gw,
        &[
            "authn-policy-request-authentication.yaml",
            "authn-policy-require-token-per-path.yaml",
        ],
    );
    ready(&p, &demo).await;
    assert_eq!(code(&p, "/headers", None).await, 403);
    assert_eq!(code(&p, "/ip", None).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_with_jwt_task() {
    let env = env().await;
    let demo = fixture("demo.jwt");
    let group = fixture("groups-scope.jwt");
    let app = ("app", "httpbin");
    let ns = "foo";

    let p = proxy(&env, ns, app, &["authz-jwt-request-authentication.yaml"]);
    ready(&p, &demo).await;
    assert_eq!(code(&p, "/headers", Some("invalidToken")).await, 401);
    assert_eq!(code(&p, "/headers", None).await, 200);
    drop(p);

    let p = proxy(
        &env,
        ns,
        app,
        &[
            "authz-jwt-request-authentication.yaml",
            "authz-jwt-require-jwt.yaml",
        ],
    );
    ready(&p, &demo).await;
    assert_eq!(code(&p, "/headers", Some(&demo)).await, 200);
    assert_eq!(code(&p, "/headers", None).await, 403);
    drop(p);

    let p = proxy(
        &env,
        ns,
        app,
        &[
            "authz-jwt-request-authentication.yaml",
            "authz-jwt-require-jwt-groups.yaml",
        ],
    );
    ready(&p, &group).await;
    assert_eq!(code(&p, "/headers", Some(&group)).await, 200);
    assert_eq!(code(&p, "/headers", Some(&demo)).await, 403);
}

/// `warden check` of the authz-jwt workload: its RequestAuthentication, each issuer and where
/// its keys come from, and the policies that use identities; a malformed inline JWKS is a
/// located error, as Istio's webhook refuses it.
#[test]
fn check_names_issuers_key_sources_and_identity_users() {
    let yaml = format!(
        "{}\n---\n{}\n---\n{}",
        fixture("authn-policy-gateway.yaml"),
        fixture("authz-jwt-request-authentication.yaml"),
        fixture("authz-jwt-require-jwt-groups.yaml")
    );
    let identity = warden_proxy::ProxyIdentity {
        namespace: "foo".into(),
        labels: [("app".to_string(), "httpbin".to_string())].into(),
        ..Default::default()
    };
    let loaded = warden_config::load_str("t.yaml", &yaml).unwrap();
    let snap = warden_proxy::Snapshot::build(loaded, &identity, None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    for want in [
        "request authentication (RequestAuthentication/jwt-example):",
        "  issuer testing@secure.istio.io: jwksUri https://raw.githubusercontent.com/istio/istio/release-1.8/security/tools/jwt/samples/jwks.json",
        "tokens of that issuer get 401 \"Jwks remote fetch is failed\"",
        "identities used by: AuthorizationPolicy/require-jwt (requestPrincipals, request.auth.claims[groups])",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }

    let bad = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: bad, namespace: foo}\nspec:\n  jwtRules:\n  - issuer: x\n    jwks: '{\"keys\": 3}'\n";
    let loaded = warden_config::load_str(
        "bad.yaml",
        &format!("{}\n---\n{bad}", fixture("authn-policy-gateway.yaml")),
    )
    .unwrap();
    let err = warden_proxy::Snapshot::build(loaded, &identity, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("RequestAuthentication/bad")
            && err.contains("spec.jwtRules[0].jwks")
            && err.contains("jwks parse error: [keys] in Jwks is not an array"),
        "{err}"
    );
}
