//! The files in examples/authz load, compile and decide as their comments say.

use http::HeaderMap;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use warden_authz::{Authorizer, HttpAttrs, ProxyScope};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/authz")
}

fn gateway_scope() -> ProxyScope {
    ProxyScope {
        labels: BTreeMap::from([("istio".into(), "ingressgateway".into())]),
        ..ProxyScope::default()
    }
}

fn compile_file(path: &Path) -> Authorizer {
    let loaded = warden_config::load_paths(&[path.to_path_buf()]).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    Authorizer::compile(&loaded.set.authorization_policies, &gateway_scope())
        .unwrap_or_else(|p| panic!("{p:?}"))
}

fn allowed(a: &Authorizer, peer: &str, path: &str, headers: &HeaderMap) -> bool {
    let ip: IpAddr = peer.parse().unwrap();
    a.check_http(&HttpAttrs {
        direct_peer: ip,
        client_ip: ip,
        dest_ip: "127.0.0.1".parse().unwrap(),
        dest_port: 80,
        host: "example.com",
        method: "GET",
        path,
        headers,
        sni: None,
        principal: None,
        request_auth: None,
    })
    .allow
}

#[test]
fn seed_001_allowlist() {
    let a = compile_file(&examples_dir().join("seed-001-allowlist.yaml"));
    let h = HeaderMap::new();
    assert!(allowed(&a, "127.0.0.2", "/", &h));
    assert!(!allowed(&a, "127.0.0.1", "/", &h));
    assert!(allowed(&a, "0.1.1.1", "/", &h));
}

#[test]
fn deny_and_dry_run() {
    let a = compile_file(&examples_dir().join("deny-and-dry-run.yaml"));
    let mut h = HeaderMap::new();
    assert!(allowed(&a, "10.1.1.1", "/admin/x", &h));
    assert!(!allowed(&a, "203.0.113.1", "/admin/x", &h));
    assert!(allowed(&a, "203.0.113.1", "/", &h));
    h.insert("user-agent", "zgrab/0.x".parse().unwrap());
    let ip: IpAddr = "203.0.113.1".parse().unwrap();
    let d = a.check_http(&HttpAttrs {
        direct_peer: ip,
        client_ip: ip,
        dest_ip: ip,
        dest_port: 80,
        host: "x",
        method: "GET",
        path: "/",
        headers: &h,
        sni: None,
        principal: None,
        request_auth: None,
    });
    assert!(d.allow);
    assert_eq!(d.shadow_denied.len(), 1);
    assert_eq!(
        &*d.shadow_denied[0],
        "ns[istio-system]-policy[trial-block-scanner]-rule[0]"
    );
}

/// The generator's output (both shapes, mixed families) loads and allows exactly its entries.
#[test]
fn generated_allowlists_load() {
    let dir = std::env::temp_dir().join(format!("warden-authz-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (args, file) in [
        (vec!["--count", "2000", "--mixed"], "one-rule.yaml"),
        (vec!["--count", "500", "--rule-per-ip"], "per-ip.yaml"),
    ] {
        let out = dir.join(file);
        let status = std::process::Command::new("python3")
            .arg(examples_dir().join("gen-allowlist.py"))
            .args(&args)
            .arg("-o")
            .arg(&out)
            .status()
            .expect("python3 runs gen-allowlist.py");
        assert!(status.success());
        let a = compile_file(&out);
        let h = HeaderMap::new();
        assert!(allowed(&a, "127.0.0.2", "/", &h), "{file}");
        assert!(!allowed(&a, "127.0.0.1", "/", &h), "{file}");
        assert!(allowed(&a, "0.0.1.1", "/", &h), "{file}");
    }
    let a = compile_file(&dir.join("one-rule.yaml"));
    assert!(allowed(&a, "2001:db8:0:4::1", "/", &HeaderMap::new()));
    assert!(allowed(&a, "2001:db8:0:8::abcd", "/", &HeaderMap::new()));
    assert_eq!(a.stats().cidrs, 2001);
    std::fs::remove_dir_all(&dir).ok();
}
