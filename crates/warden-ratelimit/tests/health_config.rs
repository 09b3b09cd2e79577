//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: `/healthcheck` and grpc.health follow whether the
//! active config has a domain; without it, health ignores the config.

mod common;

use common::*;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const DOMAIN: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
";

async fn status(h: &Harness) -> (u16, i32, i32) {
    let http = reqwest::get(h.http("/healthcheck"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", h.server.grpc_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut client = HealthClient::new(channel);
    let mut grpc = [0; 2];
    for (slot, name) in grpc.iter_mut().zip(["ratelimit", ""]) {
        *slot = client
            .check(HealthCheckRequest {
                service: name.into(),
            })
            .await
            .map(|r| r.into_inner().status)
            .unwrap_or(-1);
    }
    (http, grpc[0], grpc[1])
}

const SERVING: i32 = ServingStatus::Serving as i32;
const NOT_SERVING: i32 = ServingStatus::NotServing as i32;

#[tokio::test]
async fn unhealthy_until_a_domain_is_loaded() {
    // No file yet: the config loads, with no domain.
    let h = start_with(
        &[],
        None,
        |s| s.healthy_with_at_least_one_config_loaded = true,
        None,
    )
    .await;
    assert_eq!(status(&h).await, (500, NOT_SERVING, NOT_SERVING));
    // A broken file: still nothing loaded.
    h.dir.write("bad.yaml", "domain: [").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&h).await, (500, NOT_SERVING, NOT_SERVING));
    std::fs::remove_file(h.dir.path().join("bad.yaml")).unwrap();
    h.dir.write("d.yaml", DOMAIN).unwrap();
    eventually(
        "healthy once a domain loads",
        Duration::from_secs(5),
        async || status(&h).await == (200, SERVING, SERVING),
    )
    .await;
    // Every domain removed: unhealthy again.
    std::fs::remove_file(h.dir.path().join("d.yaml")).unwrap();
    eventually(
        "unhealthy without domains",
        Duration::from_secs(5),
        async || status(&h).await == (500, NOT_SERVING, NOT_SERVING),
    )
    .await;
}

#[tokio::test]
async fn without_the_setting_health_ignores_the_config() {
    let h = start(&[], None).await;
    assert_eq!(status(&h).await, (200, SERVING, SERVING));
}

#[test]
fn the_variable_is_read() {
    let vars = [("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let s = warden_ratelimit::Settings::from_env_map(&vars).unwrap();
    assert!(s.healthy_with_at_least_one_config_loaded);
    let s = warden_ratelimit::Settings::from_env_map(&Default::default()).unwrap();
    assert!(!s.healthy_with_at_least_one_config_loaded);
}
