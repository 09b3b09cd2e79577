//! Istio's published `samples/bookinfo/networking/bookinfo-gateway.yaml`, unchanged
//! (crates/warden-config/tests/fixtures/istio, see its NOTICE), served alone as Istio serves it
//! without the bookinfo cluster: it loads (IST0101 for `productpage`, which nothing defines),
//! the gateway opens the sample's port 8080, and the route answers as Envoy does: 503 with no
//! body, response flag NC, counted. The proxy runs in a network namespace of its own, so the
//! sample's fixed port cannot collide with anything on the host.

mod common;

use common::WARDEN;
use std::path::PathBuf;
use std::time::Duration;
use warden_testkit::{netns, wait_until, KillOnDrop, NetNs, TempDir};

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../warden-config/tests/fixtures/istio/samples-bookinfo-gateway.yaml")
}

/// `curl -s` inside `ns`: the status code and the body (empty when curl fails).
fn curl(ns: &NetNs, url: &str) -> (String, String) {
    let out = ns
        .exec("curl", &["-s", "-m", "5", "-w", "\n%{http_code}", url])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", ""));
    (code.to_owned(), body.to_owned())
}

#[test]
fn bookinfo_gateway_alone_answers_503_nc_on_its_own_port() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let ns = NetNs::new("smp").expect("network namespace");
    let dir = TempDir::new("sample-alone").expect("temp dir");
    let log = dir.path().join("access.log");

    let check = std::process::Command::new(WARDEN)
        .args(["check", "-c"])
        .arg(sample())
        .output()
        .expect("warden check runs");
    let said = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(said.contains("IST0101"), "{said}");

    let mut proxy = ns.command(WARDEN);
    proxy
        .args(["proxy", "-c"])
        .arg(sample())
        .args(["--label", "istio=ingressgateway", "--namespace", "default"])
        .args(["--admin", "127.0.0.1:15000", "--no-watch", "--access-log"])
        .arg(&log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _proxy = KillOnDrop::spawn(proxy).expect("warden proxy starts");
    assert!(
        wait_until(Duration::from_secs(20), || curl(
            &ns,
            "http://127.0.0.1:15000/ready"
        )
        .0 == "200"),
        "the gateway did not get ready"
    );

    let (code, body) = curl(&ns, "http://127.0.0.1:8080/productpage");
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("503", ""),
        "Envoy's NC answer"
    );
    let stats = curl(&ns, "http://127.0.0.1:15000/stats/prometheus").1;
    assert!(
        stats.contains("warden_upstream_errors_total{kind=\"no_cluster\"} 1"),
        "{stats}"
    );
    assert!(
        stats.lines().any(|l| l.starts_with("istio_requests_total{")
            && l.contains("response_code=\"503\"")
            && l.contains("response_flags=\"NC\"")
            && l.ends_with(" 1")),
        "{stats}"
    );
    let mut logged = String::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            logged = std::fs::read_to_string(&log).unwrap_or_default();
            !logged.is_empty()
        }),
        "no access log line"
    );
    assert!(logged.contains("NC"), "{logged}");
}
