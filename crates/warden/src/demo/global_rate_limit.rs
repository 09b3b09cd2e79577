//! Scenario: the global limit of seed 000 (docs/lab.md; 100 requests per minute per client IP
//! on one path) on the embedded rate limit service: no RLS, no Redis, no Lua.

use super::traffic::{count, describe, send};
use super::{Outcome, Stage};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const CONFIG: &str = r#"apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: login-per-ip, namespace: istio-system}
spec:
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /api/login}
      limit: {requests: 100, unit: Minute}"#;

/// The embedded limiter counts in wall-clock minute windows; start away from a window edge
/// so the demo's counts are exact.
async fn away_from_minute_edge() {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if secs % 60 >= 55 {
        tokio::time::sleep(Duration::from_secs(61 - secs % 60)).await;
    }
}

pub async fn run(stage: &Stage) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    away_from_minute_edge().await;
    let url = format!("{}/api/login", stage.gateway_url);
    let one = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    let two = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    stage.echo.reset_counts();
    let codes = send(&url, one, 180, 8, &[]).await?;
    let reached = stage.echo.total();
    out.check(
        count(&codes, 200) == 100 && count(&codes, 429) == 80 && reached == 100,
        format!(
            "180 x GET /api/login from 127.0.0.1 -> {} ; upstream saw {reached} (limit 100/min per IP)",
            describe(&codes)
        ),
    );
    let cache_hits = stage.metric("warden_ratelimit_over_limit_cache_hits_total ");
    out.check(
        cache_hits > 0,
        format!("{cache_hits} of the 429s answered from the over-limit cache, without asking the limiter"),
    );

    stage.echo.reset_counts();
    let codes = send(&url, two, 90, 8, &[]).await?;
    let reached = stage.echo.total();
    out.check(
        count(&codes, 200) == 90 && reached == 90,
        format!(
            " 90 x GET /api/login from 127.0.0.2 -> {} ; upstream saw {reached} (its own counter)",
            describe(&codes)
        ),
    );
    Ok(out)
}
