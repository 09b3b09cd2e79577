//! Scenario: seed 001's allowlist of 100k addresses (generated here) guarding `/authz`; the
//! list includes 127.0.0.2 but not 127.0.0.1. Other paths stay open to everyone.

use super::traffic::{count, describe, send};
use super::{Outcome, Stage};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

/// Addresses in the allowlist: 127.0.0.2 plus 99,999 scattered over 10.0.0.0/8 (every third
/// address, so they stay 100k separate entries).
pub const ALLOWLIST_SIZE: u32 = 100_000;

/// An ALLOW policy with two rules: the allowlist for `/authz*`, and everything else for any
/// client (an ALLOW policy denies whatever none of its rules match).
pub fn config() -> String {
    let mut y = String::from(
        r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allowlist-100k, namespace: istio-system}
spec:
  action: ALLOW
  rules:
  - to: [{operation: {notPaths: ["/authz*"]}}]
  - to: [{operation: {paths: ["/authz*"]}}]
    from:
    - source:
        ipBlocks:
        - 127.0.0.2
"#,
    );
    for i in 1..ALLOWLIST_SIZE {
        let [_, b, c, d] = (i * 3).to_be_bytes();
        // Writing to a String cannot fail.
        let _ = writeln!(y, "        - 10.{b}.{c}.{d}");
    }
    y
}

pub async fn run(stage: &Stage) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let url = format!("{}/authz", stage.gateway_url);
    let listed = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let unlisted = IpAddr::V4(Ipv4Addr::LOCALHOST);

    stage.echo.reset_counts();
    let codes = send(&url, listed, 200, 8, &[]).await?;
    let reached = stage.echo.total();
    out.check(
        count(&codes, 200) == 200 && reached == 200,
        format!(
            "200 x GET /authz from 127.0.0.2 -> {} ; upstream saw {reached} (in the {ALLOWLIST_SIZE}-address allowlist)",
            describe(&codes)
        ),
    );

    stage.echo.reset_counts();
    let denied_before = stage.metric("warden_authz_denied_total{policy=\"none\"} ");
    let codes = send(&url, unlisted, 200, 8, &[]).await?;
    let reached = stage.echo.total();
    let denied = stage.metric("warden_authz_denied_total{policy=\"none\"} ") - denied_before;
    out.check(
        count(&codes, 403) == 200 && reached == 0 && denied == 200,
        format!(
            "200 x GET /authz from 127.0.0.1 -> {} ; upstream saw {reached}; warden_authz_denied_total{{policy=\"none\"}} +{denied}",
            describe(&codes)
        ),
    );

    let body = raw_denial(&url).await?;
    out.check(
        body.starts_with("HTTP/1.1 403") && body.ends_with("RBAC: access denied"),
        format!("the denial: {:?}", body.lines().next().unwrap_or_default()),
    );
    Ok(out)
}

/// One raw HTTP/1.1 exchange from 127.0.0.1, to show the 403 as a client sees it.
async fn raw_denial(url: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .ok_or_else(|| anyhow::anyhow!("unexpected gateway url {url}"))?;
    let mut s = tokio::net::TcpStream::connect(authority).await?;
    s.write_all(
        format!("GET /authz HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut raw)).await??;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}
