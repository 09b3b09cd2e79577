//! The mesh config's `warden.xffTrustedCidrs` (Envoy's `xff_trusted_cidrs`), run as the
//! binary: which `x-forwarded-for` entry is the client is decided by the proxies' addresses,
//! seen through an AuthorizationPolicy on `remoteIpBlocks` (the trusted client address) that
//! denies one client. The test's requests come from 127.0.0.1, the peer.

mod common;

use common::{run_proxy_to_exit, write_config, Warden};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use warden_testkit::TempDir;

const DIRECT_200: &str = "  - directResponse: {status: 200, body: {string: ok}}\n";

/// Denies the client 203.0.113.9, whoever forwarded it.
const DENY_ONE_CLIENT: &str = "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: deny-one, namespace: default}\nspec:\n  action: DENY\n  rules:\n  - from:\n    - source:\n        remoteIpBlocks: [203.0.113.9]\n";

/// The status code of a GET with `xff` as its `x-forwarded-for`.
fn status_with_xff(addr: SocketAddr, xff: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-for: {xff}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split(' ').nth(1).unwrap_or("none").to_owned()
}

fn proxy_with(dir: &TempDir, name: &str, mesh: &str) -> Warden {
    let mesh = dir.write(name, mesh).unwrap();
    Warden::start(
        DENY_ONE_CLIENT,
        DIRECT_200,
        &["--mesh-config", mesh.to_str().unwrap()],
    )
}

#[test]
fn trusted_cidrs_decide_which_forwarded_address_is_the_client() {
    let dir = TempDir::new("xff-cidrs").unwrap();
    // (mesh config, x-forwarded-for, status): 203.0.113.9 is denied when it is the client.
    let cases: &[(&str, &[(&str, &str)])] = &[
        // The peer (127.0.0.1) and the load balancers in 10/8 are trusted; recurse walks past
        // every trusted entry to the client.
        (
            "warden:\n  xffTrustedCidrs:\n    cidrs: [127.0.0.0/8, 10.0.0.0/8]\n    recurse: true\n",
            &[
                ("203.0.113.9, 10.1.1.1, 10.2.2.2", "403"),
                ("198.51.100.1, 10.1.1.1", "200"),
                // A spoofed entry left of the real client is not the client.
                ("203.0.113.9, 198.51.100.1, 10.1.1.1", "200"),
                // Every entry trusted: the first.
                ("10.1.1.1, 10.2.2.2", "200"),
            ],
        ),
        // Without recurse only the last entry is read.
        (
            "warden:\n  xffTrustedCidrs:\n    cidrs: [127.0.0.0/8, 10.0.0.0/8]\n",
            &[("203.0.113.9, 10.1.1.1", "200"), ("10.1.1.1, 203.0.113.9", "403")],
        ),
        // The peer is not among the trusted proxies: its x-forwarded-for is not believed.
        (
            "warden:\n  xffTrustedCidrs:\n    cidrs: [10.0.0.0/8]\n    recurse: true\n",
            &[("203.0.113.9", "200"), ("203.0.113.9, 10.1.1.1", "200")],
        ),
    ];
    for (i, (mesh, requests)) in cases.iter().enumerate() {
        let w = proxy_with(&dir, &format!("mesh-{i}.yaml"), mesh);
        for (xff, want) in *requests {
            assert_eq!(
                status_with_xff(w.listener, xff),
                *want,
                "mesh config {mesh:?}, x-forwarded-for {xff:?}"
            );
        }
    }
}

#[test]
fn trusted_cidrs_and_a_trusted_hop_count_are_not_both_taken() {
    let dir = TempDir::new("xff-cidrs-twice").unwrap();
    let (config, _) = write_config(&dir, "", DIRECT_200);
    let mesh = dir
        .write(
            "mesh.yaml",
            "defaultConfig:\n  gatewayTopology: {numTrustedProxies: 1}\nwarden:\n  xffTrustedCidrs: {cidrs: [10.0.0.0/8]}\n",
        )
        .unwrap();
    let out = run_proxy_to_exit(&config, &["--mesh-config", mesh.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("xffTrustedCidrs")
            && text.contains("numTrustedProxies 1")
            && text.contains("the mesh config's defaultConfig.gatewayTopology"),
        "{text}"
    );
    // `warden check` refuses it the same way, and shows the CIDRs when they are alone.
    let check = |mesh: &std::path::Path| {
        std::process::Command::new(common::WARDEN)
            .args(["check", "-c"])
            .arg(&config)
            .arg("--mesh-config")
            .arg(mesh)
            .output()
            .unwrap()
    };
    let out = check(&mesh);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("numTrustedProxies 1"), "{text}");
    let alone = dir
        .write(
            "alone.yaml",
            "warden:\n  xffTrustedCidrs: {cidrs: [10.0.0.0/8], recurse: true}\n",
        )
        .unwrap();
    let out = check(&alone);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("trusted proxies by address: 10.0.0.0/8 (recurse"),
        "{text}"
    );
}
