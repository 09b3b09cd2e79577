//! Quota leases over real gRPC (tonic clients), on the memory store and on a real redis-server:
//! granted only to clients that ask, reserved in the counter, never more than the limit across
//! clients, and not for small limits or modes whose answers must stay per call.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::quota::ExpirationSpecifier;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use redis::Commands;
use std::sync::Arc;
use tonic::transport::Channel;
use warden_ratelimit::lease::LEASE_HEADER;
use warden_ratelimit::{ManualClock, RateLimitRequest};
use warden_testkit::RedisServer;

const T0: u64 = 1_700_000_040_000; // a minute boundary

fn limit_yaml(domain: &str, requests_per_minute: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: {requests_per_minute}\n"
    )
}

/// One call, asking for a lease when `leasing`.
async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    request: &RateLimitRequest,
    leasing: bool,
) -> RateLimitResponse {
    let mut call = tonic::Request::new(request.clone());
    if leasing {
        // The name clients put on the wire (`lease::LEASE_HEADER`).
        assert_eq!(LEASE_HEADER.as_str(), "warden-quota-lease");
        call.metadata_mut()
            .insert("warden-quota-lease", "1".parse().unwrap());
    }
    client.should_rate_limit(call).await.unwrap().into_inner()
}

#[tokio::test]
async fn a_client_that_asks_gets_a_lease_reserved_in_the_redis_counter() {
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 7_000);
    let mut h = start_with(
        &[("config.yaml", &limit_yaml("lease", 10_000))],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock)),
    )
    .await;
    let r = req("lease", vec![desc(&[("k", "one")])]);
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = "lease_k_one_1700000040";

    // Default policy: 0.1% of 10000 = 10 more requests, plus the call's own.
    let resp = call(&mut h.client, &r, true).await;
    assert_eq!(resp.overall_code, OK);
    let quota = resp.quota.expect("a lease");
    assert_eq!(quota.requests, 11);
    let Some(ExpirationSpecifier::ValidUntil(until)) = quota.expiration_specifier else {
        panic!("no valid_until");
    };
    assert_eq!(
        (until.seconds, until.nanos),
        (1_700_000_100, 0),
        "window end"
    );
    assert_eq!(
        resp.statuses[0].limit_remaining, 9_999,
        "the call's own view"
    );
    let count: u64 = conn.get(key).unwrap();
    assert_eq!(count, 11, "the lease is reserved in the same INCRBY");

    // Envoy (no metadata) is answered as the reference answers: one hit, no quota.
    let resp = call(&mut h.client, &r, false).await;
    assert!(resp.quota.is_none());
    assert_eq!(resp.statuses[0].limit_remaining, 10_000 - 12);
    let count: u64 = conn.get(key).unwrap();
    assert_eq!(count, 12);
}

/// Five clients, each on its own connection, spend their leases locally and call again when
/// they run out, until an answer says OVER_LIMIT: together they admit exactly the limit.
async fn clients_with_leases_admit_exactly_the_limit(redis: Option<&RedisServer>) {
    const LIMIT: u32 = 1_000;
    let clock = ManualClock::new(T0 + 1_000);
    let h = start_with(
        &[("config.yaml", &limit_yaml("shared", LIMIT))],
        redis,
        |s| s.limiter.lease.fraction = 0.01, // leases of 10
        Some(Arc::new(clock)),
    )
    .await;
    let r = req("shared", vec![desc(&[("k", "one")])]);
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let mut client =
            RateLimitServiceClient::connect(format!("http://{}", h.server.grpc_addr()))
                .await
                .unwrap();
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut calls, mut leased) = (0u32, 0u32, 0u32);
            loop {
                if leased > 0 {
                    leased -= 1;
                    admitted += 1;
                    continue;
                }
                calls += 1;
                let resp = call(&mut client, &r, true).await;
                if resp.overall_code != OK {
                    return (admitted, calls);
                }
                admitted += 1;
                leased = resp.quota.map_or(0, |q| q.requests - 1);
            }
        }));
    }
    let (mut admitted, mut calls) = (0, 0);
    for t in tasks {
        let (a, c) = t.await.unwrap();
        admitted += a;
        calls += c;
    }
    assert_eq!(
        admitted, LIMIT,
        "never more than the limit, and no lease lost"
    );
    assert!(
        calls < LIMIT / 5,
        "{calls} calls for {LIMIT} admitted requests"
    );
}

#[tokio::test]
async fn leases_admit_exactly_the_limit_memory() {
    clients_with_leases_admit_exactly_the_limit(None).await;
}

#[tokio::test]
async fn leases_admit_exactly_the_limit_redis() {
    let redis = RedisServer::start().unwrap();
    clients_with_leases_admit_exactly_the_limit(Some(&redis)).await;
}

#[tokio::test]
async fn no_lease_for_small_limits_shadow_limits_or_when_turned_off() {
    let config = "domain: modes
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100000}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 100000}
";
    let mut h = start(&[("config.yaml", config)], None).await;
    let ask = |key: &str| req("modes", vec![desc(&[(key, "v")])]);
    assert!(call(&mut h.client, &ask("small"), true)
        .await
        .quota
        .is_none());
    assert!(call(&mut h.client, &ask("shadow"), true)
        .await
        .quota
        .is_none());
    assert_eq!(
        call(&mut h.client, &ask("big"), true)
            .await
            .quota
            .map(|q| q.requests),
        Some(101)
    );
    // A set is leased only as far as its tightest limit allows: `small` allows none.
    let both = req(
        "modes",
        vec![desc(&[("big", "v")]), desc(&[("small", "v")])],
    );
    assert!(call(&mut h.client, &both, true).await.quota.is_none());

    let mut off = start_with(
        &[("config.yaml", config)],
        None,
        |s| s.limiter.lease.fraction = 0.0,
        None,
    )
    .await;
    assert!(call(&mut off.client, &ask("big"), true)
        .await
        .quota
        .is_none());
}
