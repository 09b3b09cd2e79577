//! RequestAuthentication through the proxy over real sockets, with tokens minted by a real JOSE
//! library (PyJWT, `tests/jwt/mint.py`) and by `openssl`: every case answers what Envoy's
//! jwt_authn answers (status, body, `www-authenticate`), valid tokens reach the upstream
//! without the token and with their claim headers.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

const ISS: &str = "testing@secure.istio.io";
const HS_ISS: &str = "hs@warden.test";

/// Request headers of a case.
type Headers<'a> = Vec<(&'a str, String)>;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A Python 3 that has PyJWT and `cryptography` (Debian's python3-jwt; test.sh installs it).
fn python() -> PathBuf {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", "import jwt, cryptography"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(p);
        }
    }
    panic!(
        "no python3 with PyJWT and cryptography (apt-get install python3-jwt python3-cryptography)"
    )
}

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Private keys made by openssl in `dir`.
fn keys(dir: &Path) -> [(String, PathBuf); 4] {
    let gen = |name: &str, args: &[&str]| {
        let path = dir.join(format!("{name}.pem"));
        let mut all = vec!["genpkey"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-out", path.to_str().unwrap()]);
        openssl(&all);
        (name.to_owned(), path)
    };
    [
        gen(
            "rsa",
            &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        ),
        gen(
            "ec",
            &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        ),
        gen("ed", &["-algorithm", "ed25519"]),
        gen(
            "rsa2",
            &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        ),
    ]
}

/// Run mint.py on `spec`; its JSON answer.
fn mint(dir: &Path, spec: &serde_json::Value) -> serde_json::Value {
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jwt/mint.py");
    let out = Command::new(python())
        .arg(script)
        .arg(&spec_path)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "mint.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("mint.py prints JSON")
}

/// An RS256 token signed by `openssl dgst` (no JOSE library involved).
fn openssl_rs256(dir: &Path, key: &Path, kid: &str, claims: &serde_json::Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"RS256","typ":"JWT","kid":"{kid}"}}"#));
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let input = dir.join("signed.txt");
    std::fs::write(&input, &signed).unwrap();
    let sig = openssl(&[
        "dgst",
        "-sha256",
        "-sign",
        key.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
}

struct Setup {
    tokens: serde_json::Value,
    openssl_token: String,
    yaml_rules: String,
    _dir: warden_testkit::TempDir,
}

fn setup() -> Setup {
    let dir = warden_testkit::TempDir::new("jwt-authn").unwrap();
    let [(_, rsa), (_, ec), (_, ed), (_, rsa2)] = keys(dir.path());
    let t = now();
    let claims = |extra: serde_json::Value| {
        let mut c = serde_json::json!({"iss": ISS, "sub": "alice", "aud": "api", "exp": t + 600,
            "groups": ["group1", "group2"]});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                c.insert(k.clone(), v.clone());
            }
        }
        c
    };
    let spec = serde_json::json!({
        "keys": {
            "rs": {"alg": "RS256", "pem": rsa}, "ps": {"alg": "PS256", "pem": rsa},
            "es": {"alg": "ES256", "pem": ec}, "ed": {"alg": "EdDSA", "pem": ed},
            "other": {"alg": "RS256", "pem": rsa2},
            "hs": {"alg": "HS256", "secret": "a shared secret of 32 bytes min"}
        },
        "jwks": {"main": ["rs", "ps", "es", "ed"], "hs": ["hs"]},
        "tokens": {
            "rs256": {"kid": "rs", "claims": claims(serde_json::json!({}))},
            "ps256": {"kid": "ps", "claims": claims(serde_json::json!({"sub": "ps-user"}))},
            "es256": {"kid": "es", "claims": claims(serde_json::json!({"sub": "es-user"}))},
            "eddsa": {"kid": "ed", "claims": claims(serde_json::json!({"sub": "ed-user"}))},
            "expired": {"kid": "rs", "claims": claims(serde_json::json!({"exp": t - 120}))},
            "not_yet": {"kid": "es", "claims": claims(serde_json::json!({"nbf": t + 120}))},
            "wrong_aud": {"kid": "rs", "claims": claims(serde_json::json!({"aud": "other"}))},
            "wrong_iss": {"kid": "rs", "claims": claims(serde_json::json!({"iss": "evil@example"}))},
            "unknown_kid": {"kid": "other", "claims": claims(serde_json::json!({}))},
            "none": {"kid": "rs", "alg": "none", "claims": claims(serde_json::json!({}))},
            "hs_good": {"kid": "hs", "claims": {"iss": HS_ISS, "sub": "carol", "exp": t + 600}},
            "hs_wrong_secret": {"kid": "hs", "secret": "another secret of at least 32 b",
                "claims": {"iss": HS_ISS, "sub": "carol", "exp": t + 600}}
        }
    });
    let minted = mint(dir.path(), &spec);
    let openssl_token = openssl_rs256(
        dir.path(),
        &rsa,
        "rs",
        &claims(serde_json::json!({"sub": "openssl-user"})),
    );
    let main = minted["jwks"]["main"].as_str().unwrap().to_owned();
    let hs = minted["jwks"]["hs"].as_str().unwrap().to_owned();
    let yaml_rules = format!(
        r#"---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: jwt-example, namespace: default}}
spec:
  jwtRules:
  - issuer: "{ISS}"
    audiences: [api]
    jwks: '{main}'
    outputClaimToHeaders:
    - {{header: x-jwt-sub, claim: sub}}
---
apiVersion: security.istio.io/v1beta1
kind: RequestAuthentication
metadata: {{name: jwt-hs, namespace: default}}
spec:
  jwtRules:
  - issuer: "{HS_ISS}"
    jwks: '{hs}'
    fromHeaders: [{{name: Authorization, prefix: "Bearer "}}]
    fromCookies: [session]
"#
    );
    Setup {
        tokens: minted["tokens"].clone(),
        openssl_token,
        yaml_rules,
        _dir: dir,
    }
}

/// What a client got: status, body, `www-authenticate`.
async fn get(url: &str, headers: &[(&str, String)]) -> (u16, String, Option<String>) {
    let mut r = client().get(url);
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, resp.text().await.unwrap(), www)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_get_what_envoy_jwt_authn_answers() {
    let s = setup();
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", &s.yaml_rules));
    let base = format!("http://{}", addr(&proxy, 0));
    let url = format!("{base}/headers");
    let realm = format!("Bearer realm=\"{url}\", error=\"invalid_token\"");
    let token = |name: &str| s.tokens[name].as_str().unwrap().to_owned();
    let bearer = |t: String| vec![("authorization", format!("Bearer {t}"))];

    let denied: &[(&str, Headers, u16, &str)] = &[
        ("expired", bearer(token("expired")), 401, "Jwt is expired"),
        (
            "not yet valid",
            bearer(token("not_yet")),
            401,
            "Jwt not yet valid",
        ),
        (
            "wrong audience",
            bearer(token("wrong_aud")),
            403,
            "Audiences in Jwt are not allowed",
        ),
        (
            "wrong issuer",
            bearer(token("wrong_iss")),
            401,
            "Jwt issuer is not configured",
        ),
        (
            "unknown kid",
            bearer(token("unknown_kid")),
            401,
            "Jwks doesn't have key to match kid or alg from Jwt",
        ),
        (
            "alg none",
            bearer(token("none")),
            401,
            "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections",
        ),
        (
            "HS256 wrong secret",
            bearer(token("hs_wrong_secret")),
            401,
            "Jwt verification fails",
        ),
        (
            "HS256 wrong secret in a cookie",
            vec![("cookie", format!("session={}", token("hs_wrong_secret")))],
            401,
            "Jwt verification fails",
        ),
    ];
    for (name, headers, status, body) in denied {
        let got = get(&url, headers).await;
        assert_eq!(
            got,
            (*status, body.to_string(), Some(realm.clone())),
            "{name}"
        );
    }
    // A bad signature: a valid token's payload changed.
    let good = token("rs256");
    let mut parts: Vec<&str> = good.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(
        serde_json::json!({"iss": ISS, "sub": "mallory", "aud": "api", "exp": now() + 600})
            .to_string(),
    );
    parts[1] = &forged;
    let got = get(&url, &bearer(parts.join("."))).await;
    assert_eq!(
        got,
        (401, "Jwt verification fails".into(), Some(realm.clone())),
        "bad signature"
    );
    // The same bad token in the query string.
    let got = get(&format!("{url}?access_token={}", parts.join(".")), &[]).await;
    assert_eq!(got.0, 401, "bad signature in access_token");
    assert!(
        seen.lock().unwrap().requests.is_empty(),
        "nothing refused reached the upstream"
    );

    let allowed: &[(&str, String, Headers, &str)] = &[
        (
            "RS256 (PyJWT)",
            url.clone(),
            bearer(token("rs256")),
            "alice",
        ),
        ("PS256", url.clone(), bearer(token("ps256")), "ps-user"),
        ("ES256", url.clone(), bearer(token("es256")), "es-user"),
        ("EdDSA", url.clone(), bearer(token("eddsa")), "ed-user"),
        (
            "RS256 (openssl)",
            url.clone(),
            bearer(s.openssl_token.clone()),
            "openssl-user",
        ),
        (
            "query parameter",
            format!("{url}?a=1&access_token={}", token("rs256")),
            vec![],
            "alice",
        ),
        (
            "HS256 in a cookie",
            url.clone(),
            vec![(
                "cookie",
                format!("theme=dark; session={}", token("hs_good")),
            )],
            "",
        ),
        ("no token", url.clone(), vec![], ""),
    ];
    for (i, (name, u, headers, sub)) in allowed.iter().enumerate() {
        let got = get(u, headers).await;
        assert_eq!((got.0, got.2.as_deref()), (200, None), "{name}: {}", got.1);
        let req = seen.lock().unwrap().requests[i].clone();
        let lower = req.to_ascii_lowercase();
        assert!(
            !lower.contains("\r\nauthorization:"),
            "{name}: the token is not forwarded: {req}"
        );
        assert!(
            !lower.contains("access_token="),
            "{name}: the parameter is removed: {req}"
        );
        if sub.is_empty() {
            assert!(!lower.contains("x-jwt-sub"), "{name}: {req}");
        } else {
            assert!(
                lower.contains(&format!("\r\nx-jwt-sub: {sub}\r\n")),
                "{name}: {req}"
            );
        }
    }
    assert!(seen.lock().unwrap().requests[5].starts_with("GET /headers?a=1 "));
    // Verification cost and outcomes: the refused tokens by reason; the rs256 token, sent twice,
    // verified once and then taken from the cache.
    let text = proxy.metrics_text();
    for line in [
        "warden_jwt_authn_denied_total{reason=\"expired\"} 1",
        "warden_jwt_authn_denied_total{reason=\"not_yet_valid\"} 1",
        "warden_jwt_authn_denied_total{reason=\"audience_not_allowed\"} 1",
        "warden_jwt_authn_denied_total{reason=\"unknown_issuer\"} 1",
        "warden_jwt_authn_denied_total{reason=\"no_matching_key\"} 1",
        "warden_jwt_authn_denied_total{reason=\"bad_signature\"} 4",
        "warden_jwt_authn_cache_hits_total 1",
        "warden_jwt_authn_no_token_total 1",
        "warden_jwt_authn_allowed_total 7",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // Envoy leaves a cookie token in place.
    assert!(seen.lock().unwrap().requests[6].contains("session="));
}

/// A rule without output headers only removes the token's header: on a fast-path request that
/// happens in the lines as read (no edit pass). The upstream gets every other line in order,
/// none of the token's (two of them, both verified), on each request of a kept-alive connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_header_alone_is_removed_from_the_lines_as_read() {
    let s = setup();
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", &s.yaml_rules));
    let url = format!("http://{}/", addr(&proxy, 0));
    let hs = s.tokens["hs_good"].as_str().unwrap().to_owned();
    for round in 0..3 {
        let got = get(
            &url,
            &[
                ("x-before", "1".into()),
                ("authorization", format!("Bearer {hs}")),
                ("x-after", format!("{round}")),
            ],
        )
        .await;
        assert_eq!(got.0, 200, "{got:?}");
        let req = seen.lock().unwrap().requests[round].to_ascii_lowercase();
        assert!(!req.contains("authorization"), "{req}");
        let (before, after) = (
            req.find("x-before: 1"),
            req.find(&format!("x-after: {round}")),
        );
        assert!(
            before.is_some() && after.is_some() && before < after,
            "the other lines, in order: {req}"
        );
    }
    // Two tokens of the same rule in two lines: both verified, both removed.
    let mut r = client().get(&url);
    r = r.header("authorization", format!("Bearer {hs}"));
    r = r.header("authorization", format!("Bearer {hs}"));
    assert_eq!(r.send().await.unwrap().status(), 200);
    let req = seen.lock().unwrap().requests[3].to_ascii_lowercase();
    assert!(!req.contains("authorization"), "{req}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_send_its_own_claim_headers() {
    let s = setup();
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", &s.yaml_rules));
    let url = format!("http://{}/", addr(&proxy, 0));
    let got = get(&url, &[("x-jwt-sub", "admin".into())]).await;
    assert_eq!(got.0, 200);
    let req = seen.lock().unwrap().requests[0].to_ascii_lowercase();
    assert!(!req.contains("x-jwt-sub"), "{req}");
}

/// jwt_authn's identity and payload reach the filters after it even when it changes nothing in
/// the request (`forwardOriginalToken`, no output headers): RBAC matches the principal, a Lua
/// filter reads the payload from dynamic metadata as Envoy's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_token_names_its_principal_and_lua_reads_its_payload() {
    let s = setup();
    let main_jwks = s
        .yaml_rules
        .lines()
        .find_map(|l| l.trim().strip_prefix("jwks: "))
        .unwrap()
        .to_owned();
    let policies = format!(
        r#"---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: forwarded, namespace: default}}
spec:
  jwtRules:
  - issuer: "{ISS}"
    jwks: {main_jwks}
    forwardOriginalToken: true
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: alice-only, namespace: default}}
spec:
  action: ALLOW
  rules:
  - from: [{{source: {{requestPrincipals: ["{ISS}/alice"]}}}}]
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: lua, namespace: istio-system}}
spec:
  configPatches:
    - applyTo: HTTP_FILTER
      match:
        context: GATEWAY
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager
              subFilter: {{name: envoy.filters.http.router}}
      patch:
        operation: INSERT_BEFORE
        value:
          name: envoy.filters.http.lua
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
            inline_code: |
              function envoy_on_request(request_handle)
                local jwt = request_handle:streamInfo():dynamicMetadata():get("envoy.filters.http.jwt_authn")
                if jwt ~= nil then
                  request_handle:headers():add("x-lua-sub", jwt["payload"]["sub"])
                end
              end
"#
    );
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", &policies));
    let url = format!("http://{}/", addr(&proxy, 0));
    let alice = s.tokens["rs256"].as_str().unwrap().to_owned();
    let got = get(&url, &[("authorization", format!("Bearer {alice}"))]).await;
    assert_eq!(got.0, 200, "{got:?}");
    let req = seen.lock().unwrap().requests[0].to_ascii_lowercase();
    assert!(req.contains("authorization: bearer "), "forwarded: {req}");
    assert!(req.contains("x-lua-sub: alice"), "{req}");
    let other = s.tokens["ps256"].as_str().unwrap().to_owned();
    assert_eq!(
        get(&url, &[("authorization", format!("Bearer {other}"))])
            .await
            .0,
        403
    );
    assert_eq!(get(&url, &[]).await.0, 403, "no token, no principal");
    assert_eq!(seen.lock().unwrap().requests.len(), 1);
}
