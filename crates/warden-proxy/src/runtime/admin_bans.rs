//! The local limiter's bans on the admin port: `GET /ratelimit/bans` (JSON: client, rule,
//! remaining seconds, strikes), `DELETE /ratelimit/bans?client=ADDR` (lift), and
//! `GET /ratelimit/bans/authorizationpolicy` (the banned addresses as an Istio DENY policy with
//! `remoteIpBlocks`, whose cost does not grow with the list). Global bans are kept by the rate
//! limit service and listed on its debug port (`docs/ratelimit-bans.md`).

use crate::filters::local_rate_limit::LocalRateLimitFilter;
use warden_ratelimit::ban::authorization_policy::{ip_blocks, render, PolicyTarget};

/// `GET /ratelimit/bans`.
pub fn list(limiter: Option<&LocalRateLimitFilter>) -> serde_json::Value {
    let bans: Vec<serde_json::Value> = limiter
        .map(|l| l.bans())
        .unwrap_or_default()
        .into_iter()
        .map(|(rule, ban)| {
            serde_json::json!({
                "client": ban.client,
                "rule": &*rule,
                "remaining_seconds": ban.remaining.as_millis().div_ceil(1000),
                "strikes": ban.strikes,
            })
        })
        .collect();
    serde_json::json!({ "bans": bans })
}

/// `DELETE /ratelimit/bans?client=ADDR`: how many bans were lifted, or why not.
pub fn lift(limiter: Option<&LocalRateLimitFilter>, query: Option<&str>) -> Result<usize, String> {
    let client = client_of(query).ok_or("want ?client=ADDRESS (or the distinct value)")?;
    Ok(limiter.map_or(0, |l| l.lift_bans(&client)))
}

/// `GET /ratelimit/bans/authorizationpolicy`.
pub fn authorization_policy(limiter: Option<&LocalRateLimitFilter>) -> String {
    let bans = limiter.map(|l| l.bans()).unwrap_or_default();
    render(
        &PolicyTarget::default(),
        &ip_blocks(bans.iter().map(|(_, b)| b.client.as_str())),
    )
}

/// The `client` parameter of a query string, decoded as a form value.
fn client_of(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "client")
        .map(|(_, v)| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_parameter() {
        let rows = [
            (Some("client=203.0.113.7"), Some("203.0.113.7")),
            (Some("x=1&client=2001%3Adb8%3A%3A1"), Some("2001:db8::1")),
            (Some("client=user+42"), Some("user 42")),
            (Some("client="), None),
            (Some("other=1"), None),
            (None, None),
            (Some("client=%4"), Some("%4")),
        ];
        for (query, want) in rows {
            assert_eq!(client_of(query).as_deref(), want, "{query:?}");
        }
    }
}
