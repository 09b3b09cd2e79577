//! istio.io's "JWT authentication" (authn-policy, end-user part, in its Istio APIs and Gateway
//! API forms side by side) and "Authorization with JWT" (authz-jwt) tasks on the gateway, their
//! YAML as published (`fixtures/istio-jwt/`, see its NOTICE) but for the Gateway's port 80,
//! moved to a free port. The jwksUri host,
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
    /// The same cluster exposed by the Gateway API form of the task's gateway.
    gateway_api_yaml: String,
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
    // The task applies the sample with `-n foo`; its port 80 is moved to a free one too.
    let gateway_api = fixture("samples-httpbin-gateway-api-httpbin-gateway.yaml")
        .replace(
            "metadata:\n  name: ",
            "metadata:\n  namespace: foo\n  name: ",
        )
        .replace("port: 80\n", &format!("port: {port}\n"));
    let gateway_api_yaml = format!(
        "{gateway_api}\n---\n{}",
        cluster(echo.addr, nginx.addr().port())
    );
    Env {
        _pki: pki,
        _nginx: nginx,
        mesh,
        _www: www,
        base_yaml,
        gateway_api_yaml,
    }
}

/// The ingress gateway (istio-system, `istio=ingressgateway`) or, for authz-jwt, a proxy for
/// httpbin's workload (`foo`, `app=httpbin`), with `docs` applied.
fn proxy(env: &Env, namespace: &str, label: (&str, &str), docs: &[&str]) -> RunningProxy {
    proxy_over(env, &env.base_yaml, namespace, label, docs)
}

/// [`proxy`] over `base` (the cluster and a form of the task's gateway).
fn proxy_over(
    env: &Env,
    base: &str,
    namespace: &str,
    label: (&str, &str),
    docs: &[&str],
) -> RunningProxy {
    let mut yaml = base.to_string();
    for d in docs {
        yaml.push_str("\n---\n");
        yaml.push_str(&fixture(d));
    }
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.namespace = namespace.into();
    opts.labels.insert(label.0.into(), label.1.into());
    // httpbin's policies are served by a gateway-mode proxy carrying its labels too (the
    // Gateway's selector must pick the proxy; the sidecar form is crates/warden's sidecar_jwt).
    opts.labels.insert("istio".into(), "ingressgateway".into());
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

/// One form of the authn-policy task's gateway: the proxy's namespace and label, and the
/// files of its RequestAuthentication, "require a valid token" and "per path" steps.
struct GatewayForm {
    base: String,
    namespace: &'static str,
    label: (&'static str, &'static str),
    steps: [&'static str; 3],
}

/// The task's answers on one form of its gateway, step by step: before any policy; with the
/// RequestAuthentication (no token, a bad one, demo.jwt); requiring a valid token (none,
/// demo.jwt); per path (/headers, /ip without a token).
async fn end_user_answers(env: &Env, form: &GatewayForm) -> Vec<u16> {
    let demo = fixture("demo.jwt");
    let [authn, require, per_path] = form.steps;
    let start = |docs: &[&str]| proxy_over(env, &form.base, form.namespace, form.label, docs);
    let mut out = Vec::new();
    let p = start(&[]);
    out.push(code(&p, "/headers", None).await);
    drop(p);

    let p = start(&[authn]);
    ready(&p, &demo).await;
    out.push(code(&p, "/headers", None).await);
    out.push(code(&p, "/headers", Some("deadbeef")).await);
    out.push(code(&p, "/headers", Some(&demo)).await);
    drop(p);

    let p = start(&[authn, require]);
    ready(&p, &demo).await;
    out.push(code(&p, "/headers", None).await);
    out.push(code(&p, "/headers", Some(&demo)).await);
    drop(p);

    let p = start(&[authn, per_path]);
    ready(&p, &demo).await;
    out.push(code(&p, "/headers", None).await);
    out.push(code(&p, "/ip", None).await);
    out
}

/// The authn-policy task's end-user steps on the ingress gateway in both of the task's forms:
/// the Istio APIs' (policies in istio-system selecting `istio: ingressgateway`) and the
/// Gateway API's (a Gateway in foo, and policies whose `targetRef` names it, served by the
/// proxy Istio deploys for it, labelled with its name): the same answers, the task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_authentication_task_on_the_gateway() {
    let env = env().await;
    let istio = GatewayForm {
        base: env.base_yaml.clone(),
        namespace: "istio-system",
        label: ("istio", "ingressgateway"),
        steps: [
            "authn-policy-request-authentication.yaml",
            "authn-policy-require-token.yaml",
            "authn-policy-require-token-per-path.yaml",
        ],
    };
    let gateway_api = GatewayForm {
        base: env.gateway_api_yaml.clone(),
        namespace: "foo",
        label: (
            warden_config::gateway_api::selection::GATEWAY_NAME_LABEL,
            "httpbin-gateway",
        ),
        steps: [
            "authn-policy-request-authentication-gateway-api.yaml",
            "authn-policy-require-token-gateway-api.yaml",
            "authn-policy-require-token-per-path-gateway-api.yaml",
        ],
    };
    let answers = end_user_answers(&env, &istio).await;
    assert_eq!(
        answers,
        end_user_answers(&env, &gateway_api).await,
        "Istio APIs vs Gateway API"
    );
    assert_eq!(answers, [200, 200, 401, 200, 403, 200, 403, 200]);
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
