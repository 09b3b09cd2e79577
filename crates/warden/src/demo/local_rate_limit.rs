//! Scenario: seed 000's local limit, 300 requests per client IP, the 301st answered 429 by the
//! gateway before it reaches the service; on `/limited` only, so other scenarios are unaffected.

use super::traffic::{count, describe, send};
use super::{Outcome, Stage};
use std::net::{IpAddr, Ipv4Addr};

/// The seed's window is a minute; an hour keeps the demo's counts exact on a slow machine (a
/// minute refills one token every 200 ms, an hour every 12 s).
pub const CONFIG: &str = r#"apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip-300, namespace: istio-system}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: PathPrefix, value: /limited}
      limit: {requests: 300, unit: Hour}"#;

pub async fn run(stage: &Stage) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let url = format!("{}/limited", stage.gateway_url);
    let one = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let two = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    stage.echo.reset_counts();
    let codes = send(&url, one, 301, 8, &[]).await?;
    let reached = stage.echo.total();
    out.check(
        count(&codes, 200) == 300 && count(&codes, 429) == 1 && reached == 300,
        format!(
            "301 x GET /limited from 127.0.0.1 -> {} ; upstream saw {reached} (the 429 never left the gateway)",
            describe(&codes)
        ),
    );

    stage.echo.reset_counts();
    let codes = send(&url, two, 90, 8, &[]).await?;
    let reached = stage.echo.total();
    out.check(
        count(&codes, 200) == 90 && reached == 90,
        format!(
            " 90 x GET /limited from 127.0.0.2 -> {} ; upstream saw {reached} (its own bucket)",
            describe(&codes)
        ),
    );
    Ok(out)
}
