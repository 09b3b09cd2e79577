//! RequestAuthentication `jwksUri` served over HTTPS by nginx with a certificate from a test CA
//! (the proxy trusts it as its mesh CA): key rotation (a new `kid` published, the old one
//! removed) honoured within the refresh interval with no request wrongly refused, and the JWKS
//! server stopped: tokens keep verifying with the last good keys, a proxy that never fetched
//! refuses tokens of that issuer ("Jwks remote fetch is failed") and passes requests without
//! one, and recovers once the server is back.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use warden_proxy::{Proxy, ProxyOptions};
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::Nginx;

const ISS: &str = "https://issuer.warden.test";
const REFRESH: Duration = Duration::from_secs(1);

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", "import jwt, cryptography"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return p;
        }
    }
    panic!(
        "no python3 with PyJWT and cryptography (apt-get install python3-jwt python3-cryptography)"
    )
}

/// Two ES256 keys (openssl), their JWKS per phase and a token per key (PyJWT).
fn mint(dir: &Path) -> serde_json::Value {
    for k in ["k1", "k2"] {
        let out = dir.join(format!("{k}.pem"));
        let ok = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ])
            .arg(&out)
            .status()
            .expect("openssl");
        assert!(ok.success());
    }
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let claims = |sub: &str| serde_json::json!({"iss": ISS, "sub": sub, "exp": exp});
    let spec = serde_json::json!({
        "keys": {"k1": {"alg": "ES256", "pem": dir.join("k1.pem")},
                 "k2": {"alg": "ES256", "pem": dir.join("k2.pem")}},
        "jwks": {"old": ["k1"], "both": ["k1", "k2"], "new": ["k2"]},
        "tokens": {"t1": {"kid": "k1", "claims": claims("u1")}, "t2": {"kid": "k2", "claims": claims("u2")}}
    });
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jwt/mint.py");
    let out = Command::new(python())
        .arg(script)
        .arg(&spec_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Replace the served JWKS in one step (a rename).
fn publish(root: &Path, jwks: &str) {
    let tmp = root.join(".jwks.json.tmp");
    std::fs::write(&tmp, jwks).unwrap();
    std::fs::rename(&tmp, root.join("jwks.json")).unwrap();
}

fn nginx_servers(cert: &Path, key: &Path, root: &Path) -> String {
    format!(
        "server {{ listen {{listen}} ssl; ssl_certificate {}; ssl_certificate_key {}; root {}; \
         location / {{ default_type application/json; }} }}",
        cert.display(),
        key.display(),
        root.display()
    )
}

fn start_proxy(yaml: &str, mesh_dir: &Path) -> warden_proxy::RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.jwks_refresh = REFRESH;
    opts.mesh = Some(warden_proxy::core::identity::MeshCredentials {
        dir: mesh_dir.to_path_buf(),
        trust_domain: "cluster.local".into(),
    });
    Proxy::start(opts).expect("proxy starts")
}

async fn status(url: &str, token: Option<&str>) -> (u16, String) {
    let mut r = client().get(url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Poll until `url` with `token` answers `want` (at most 10 s).
async fn until(url: &str, token: Option<&str>, want: u16) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = status(url, token).await;
        if got.0 == want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_by_kid_and_survive_an_outage() {
    let pki = Pki::new("jwks");
    let (cert, key) = pki.issue(
        "nginx",
        &Leaf {
            common_name: "localhost".into(),
            dns: vec!["localhost".into()],
            ..Leaf::default()
        },
    );
    // The proxy's mesh folder: the test CA as ca.crt.
    let mesh = warden_testkit::TempDir::new("jwks-mesh").unwrap();
    std::fs::copy(&pki.ca_path, mesh.path().join("ca.crt")).unwrap();
    let (mc, mk) = pki.issue(
        "mesh",
        &Leaf {
            common_name: "gw".into(),
            uris: vec!["spiffe://cluster.local/ns/default/sa/gw".into()],
            ..Leaf::default()
        },
    );
    std::fs::copy(mc, mesh.path().join("tls.crt")).unwrap();
    std::fs::copy(mk, mesh.path().join("tls.key")).unwrap();

    let work = warden_testkit::TempDir::new("jwks-uri").unwrap();
    let minted = mint(work.path());
    let jwks = |n: &str| minted["jwks"][n].as_str().unwrap().to_owned();
    let t1 = minted["tokens"]["t1"].as_str().unwrap().to_owned();
    let t2 = minted["tokens"]["t2"].as_str().unwrap().to_owned();
    let root = work.path().join("www");
    std::fs::create_dir(&root).unwrap();
    publish(&root, &jwks("old"));
    let servers = nginx_servers(&cert, &key, &root);
    let nginx = Nginx::start(&servers).expect("nginx starts");
    let nginx_addr = nginx.addr();

    let up = echo_http("app").await;
    let policy = format!(
        "---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: jwt}}\nspec:\n  jwtRules:\n  - issuer: \"{ISS}\"\n    jwksUri: \"https://localhost:{}/jwks.json\"\n",
        nginx_addr.port()
    );
    let yaml = http_config(up.addr, "", &policy);
    let proxy = start_proxy(&yaml, mesh.path());
    let url = format!("http://{}/", addr(&proxy, 0));
    assert_eq!(until(&url, Some(&t1), 200).await.0, 200, "first fetch");

    // Rotation under a steady client: the new key is published next to the old one, the
    // client moves to it after a refresh interval, then the old key goes.
    let mut wrongly_refused = 0;
    let mut sent = 0;
    let steady = |phase_token: &str, until_t: Instant| {
        let url = url.clone();
        let token = phase_token.to_owned();
        async move {
            let (mut n, mut bad) = (0, 0);
            while Instant::now() < until_t && n < 2_000 {
                if status(&url, Some(&token)).await.0 != 200 {
                    bad += 1;
                }
                n += 1;
            }
            (n, bad)
        }
    };
    publish(&root, &jwks("both"));
    let (n, bad) = steady(&t1, Instant::now() + REFRESH * 3).await;
    (sent, wrongly_refused) = (sent + n, wrongly_refused + bad);
    let (n, bad) = steady(&t2, Instant::now() + REFRESH).await;
    (sent, wrongly_refused) = (sent + n, wrongly_refused + bad);
    publish(&root, &jwks("new"));
    let (n, bad) = steady(&t2, Instant::now() + REFRESH * 3).await;
    (sent, wrongly_refused) = (sent + n, wrongly_refused + bad);
    assert!(sent > 0);
    eprintln!("rotation: {sent} requests, {wrongly_refused} wrongly refused");
    assert_eq!(wrongly_refused, 0, "of {sent} requests with a current key");
    // The removed key's tokens are refused, the cached verification notwithstanding.
    assert_eq!(
        status(&url, Some(&t1)).await,
        (
            401,
            "Jwks doesn't have key to match kid or alg from Jwt".into()
        )
    );

    // The JWKS server stops: the last good keys stay in use.
    drop(nginx);
    tokio::time::sleep(REFRESH * 3).await;
    assert_eq!(status(&url, Some(&t2)).await.0, 200, "last good keys kept");
    assert_eq!(status(&url, None).await.0, 200, "no token passes");
    // A proxy that never fetched them: tokens of the issuer fail, requests without pass.
    let fresh = start_proxy(&yaml, mesh.path());
    let fresh_url = format!("http://{}/", addr(&fresh, 0));
    assert_eq!(
        status(&fresh_url, Some(&t2)).await,
        (401, "Jwks remote fetch is failed".into())
    );
    assert_eq!(status(&fresh_url, None).await.0, 200);
    // The server comes back where it was: both proxies verify again.
    let _nginx = Nginx::start_at(nginx_addr, &servers, 64).expect("nginx restarts");
    assert_eq!(until(&fresh_url, Some(&t2), 200).await.0, 200, "recovered");
    assert_eq!(status(&url, Some(&t2)).await.0, 200);
}
