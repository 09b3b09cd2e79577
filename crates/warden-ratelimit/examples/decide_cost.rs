//! Cost of one in-process decision (memory backend, no gRPC): what the proxy's embedded limiter
//! pays per request. Bounded: 1,000,000 decisions on one task.
//!
//! `cargo run --release -p warden-ratelimit --example decide_cost`

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use std::time::Instant;
use warden_ratelimit::config::{load_config_set, ConfigSet};
use warden_ratelimit::{parse_config, RateLimitRequest, RateLimiter};

const N: usize = 1_000_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = load_config_set; // the file loader is what the server uses; here one string suffices
    let config = parse_config(
        "bench",
        "domain: ratelimit\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: PATH\n        rate_limit: {unit: minute, requests_per_unit: 100000000}\n",
    )?;
    let mut set = ConfigSet::default();
    set.domains.insert(config.domain.clone(), config);
    let limiter = RateLimiter::in_memory(set);
    let requests: Vec<RateLimitRequest> = (0..1000)
        .map(|i| RateLimitRequest {
            domain: "ratelimit".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![
                    Entry {
                        key: "remote_address".into(),
                        value: format!("10.0.{}.{}", i / 256, i % 256),
                    },
                    Entry {
                        key: "PATH".into(),
                        value: "/login".into(),
                    },
                ],
                ..Default::default()
            }],
            hits_addend: 0,
        })
        .collect();
    let started = Instant::now();
    let mut ok = 0usize;
    for i in 0..N {
        let r = limiter.decide(&requests[i % requests.len()]).await?;
        ok += usize::from(r.overall_code == 1);
    }
    let elapsed = started.elapsed();
    println!(
        "decide (memory backend, 1 thread): {:.0} ns/decision, {:.0} decisions/s, ok={ok}",
        elapsed.as_nanos() as f64 / N as f64,
        N as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
