//! Sending a fixed number of requests from a chosen source address and summarizing the answers.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use warden_load::load::{self, LoadConfig};

/// Send exactly `count` GET requests to `url` over `connections` connections bound to `source`.
/// Returns the status-code distribution (errors are folded in as code 0).
pub async fn send(
    url: &str,
    source: IpAddr,
    count: u64,
    connections: usize,
    headers: &[(&str, &str)],
) -> anyhow::Result<BTreeMap<u16, u64>> {
    let mut config = LoadConfig {
        target: url.to_string(),
        connections,
        requests: Some(count),
        duration: None,
        timeout: Duration::from_secs(5),
        source_ips: vec![source],
        ..LoadConfig::default()
    };
    for (name, value) in headers {
        config.headers.push((name.parse()?, value.parse()?));
    }
    let report = load::run(config).await?;
    let mut codes = report.status_codes.clone();
    let failed: u64 = report.errors.values().sum();
    if failed > 0 {
        *codes.entry(0).or_default() += failed;
    }
    Ok(codes)
}

/// `200 x 300, 429 x 1` style summary.
pub fn describe(codes: &BTreeMap<u16, u64>) -> String {
    codes
        .iter()
        .map(|(code, n)| {
            if *code == 0 {
                format!("errors x {n}")
            } else {
                format!("{code} x {n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn count(codes: &BTreeMap<u16, u64>, code: u16) -> u64 {
    codes.get(&code).copied().unwrap_or(0)
}
