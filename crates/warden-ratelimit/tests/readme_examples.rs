//! The reference README's examples as fixtures (re-told in our own configs), each run against
//! the memory backend and a real redis-server, through a real gRPC client.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use std::sync::Arc;
use warden_ratelimit::limiter::RateLimitOverride;
use warden_ratelimit::{ManualClock, RateLimitRequest};
use warden_testkit::RedisServer;

/// 2023-11-14T22:14:00Z: a minute boundary, so per-second and per-minute windows are fresh.
const T0: u64 = 1_700_000_040_000;

async fn harness(yaml: &str, redis: Option<&RedisServer>) -> (Harness, ManualClock) {
    let clock = ManualClock::new(T0);
    let h = start_with(
        &[("config.yaml", yaml)],
        redis,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    assert_eq!(h.server.initial_config_error(), None);
    (h, clock)
}

async fn call(h: &mut Harness, r: RateLimitRequest) -> RateLimitResponse {
    h.client
        .should_rate_limit(r)
        .await
        .expect("rpc")
        .into_inner()
}

/// Sends `n` identical requests and returns how many were OK overall.
async fn oks(h: &mut Harness, r: &RateLimitRequest, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if call(h, r.clone()).await.overall_code == OK {
            ok += 1;
        }
    }
    ok
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test] async fn $name() { super::$name(None).await; })*
        }
        mod redis {
            $(#[tokio::test] async fn $name() {
                let server = warden_testkit::RedisServer::start().expect("redis-server");
                super::$name(Some(&server)).await;
            })*
        }
    };
}

on_both_backends!(
    plain_values,
    default_key_and_specific_value,
    nested_descriptors_pick_the_deepest_configured_path,
    parent_limit_does_not_apply_to_longer_descriptors,
    shadow_mode_reports_ok,
    replaces_drops_the_replaced_limit,
    wildcards_exact_first_then_wildcard_then_default,
    unlimited_and_zero_limits,
    hits_addend_request_and_descriptor_level,
    request_overrides,
    quota_mode_overall_code,
    errors_are_grpc_unknown,
);

/// Example 1: one limit per database name; values not listed are not limited.
async fn plain_values(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: storage_ops
descriptors:
  - key: table
    value: accounts
    rate_limit:
      unit: second
      requests_per_unit: 3
  - key: table
    value: sessions
    rate_limit:
      unit: second
      requests_per_unit: 5
",
        redis,
    )
    .await;
    let accounts = req("storage_ops", vec![desc(&[("table", "accounts")])]);
    assert_eq!(oks(&mut h, &accounts, 5).await, 3);
    let sessions = req("storage_ops", vec![desc(&[("table", "sessions")])]);
    assert_eq!(oks(&mut h, &sessions, 7).await, 5);
    let other = call(
        &mut h,
        req("storage_ops", vec![desc(&[("table", "audit")])]),
    )
    .await;
    assert_eq!(other.overall_code, OK);
    assert_eq!(other.statuses[0].current_limit, None);
    let first = call(
        &mut h,
        req("storage_ops", vec![desc(&[("table", "accounts")])]),
    )
    .await;
    let st = &first.statuses[0];
    assert_eq!(st.code, OVER);
    assert_eq!(
        st.current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit)),
        Some((3, 1))
    );
    assert_eq!(st.duration_until_reset.as_ref().map(|d| d.seconds), Some(1));
}

/// Example 2: every client IP gets 4/min, one known IP gets 8/min.
async fn default_key_and_specific_value(redis: Option<&RedisServer>) {
    let (mut h, clock) = harness(
        "domain: edge
descriptors:
  - key: client_ip
    rate_limit:
      unit: minute
      requests_per_unit: 4
  - key: client_ip
    value: 10.9.9.9
    rate_limit:
      unit: minute
      requests_per_unit: 8
",
        redis,
    )
    .await;
    let a = req("edge", vec![desc(&[("client_ip", "192.0.2.1")])]);
    let b = req("edge", vec![desc(&[("client_ip", "192.0.2.2")])]);
    let vip = req("edge", vec![desc(&[("client_ip", "10.9.9.9")])]);
    assert_eq!(oks(&mut h, &a, 6).await, 4);
    assert_eq!(
        oks(&mut h, &b, 6).await,
        4,
        "each value has its own counter"
    );
    assert_eq!(oks(&mut h, &vip, 10).await, 8);
    // Remaining and reset are reported on the way.
    clock.set_millis(T0 + 60_000 + 15_000);
    let r = call(&mut h, a.clone()).await;
    assert_eq!(r.overall_code, OK, "a new minute window");
    assert_eq!(r.statuses[0].limit_remaining, 3);
    assert_eq!(
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds),
        Some(45)
    );
}

/// Example 3: marketing messages per destination 2/day, any message per destination 5/day.
async fn nested_descriptors_pick_the_deepest_configured_path(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: sms
descriptors:
  - key: kind
    value: marketing
    descriptors:
      - key: to
        rate_limit:
          unit: day
          requests_per_unit: 2
  - key: to
    rate_limit:
      unit: day
      requests_per_unit: 5
",
        redis,
    )
    .await;
    let marketing = req(
        "sms",
        vec![desc(&[("kind", "marketing"), ("to", "5550001")])],
    );
    assert_eq!(oks(&mut h, &marketing, 4).await, 2);
    let any = req("sms", vec![desc(&[("to", "5550001")])]);
    assert_eq!(oks(&mut h, &any, 7).await, 5);
    let r = call(&mut h, marketing).await;
    assert_eq!(
        r.statuses[0].current_limit.as_ref().map(|l| l.unit),
        Some(4)
    );
}

/// Example 4: a parent's limit does not apply to a longer descriptor, and there is no
/// backtracking from an exact branch to the default branch.
async fn parent_limit_does_not_apply_to_longer_descriptors(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: tree
descriptors:
  - key: team
    value: red
    rate_limit:
      unit: minute
      requests_per_unit: 1
    descriptors:
      - key: user
        value: ann
        rate_limit:
          unit: minute
          requests_per_unit: 2
  - key: team
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 3
",
        redis,
    )
    .await;
    let parent = req("tree", vec![desc(&[("team", "red")])]);
    assert_eq!(oks(&mut h, &parent, 3).await, 1);
    let child = req("tree", vec![desc(&[("team", "red"), ("user", "ann")])]);
    assert_eq!(
        oks(&mut h, &child, 4).await,
        2,
        "child limit, not the parent's"
    );
    // team=red exists, so team=red/user=bob does not fall back to team/user: unlimited.
    let no_backtrack = req("tree", vec![desc(&[("team", "red"), ("user", "bob")])]);
    let r = call(&mut h, no_backtrack).await;
    assert_eq!(r.statuses[0].current_limit, None);
    let default_branch = req("tree", vec![desc(&[("team", "blue"), ("user", "bob")])]);
    assert_eq!(oks(&mut h, &default_branch, 5).await, 3);
    // Deeper than configured: no limit.
    let deeper = req(
        "tree",
        vec![desc(&[("team", "red"), ("user", "ann"), ("x", "y")])],
    );
    assert_eq!(call(&mut h, deeper).await.statuses[0].current_limit, None);
}

/// Example 5: shadow_mode counts but never rejects.
async fn shadow_mode_reports_ok(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: trial
descriptors:
  - key: api
    value: search
    shadow_mode: true
    rate_limit:
      unit: second
      requests_per_unit: 1
",
        redis,
    )
    .await;
    let r = req("trial", vec![desc(&[("api", "search")])]);
    assert_eq!(oks(&mut h, &r, 4).await, 4);
    let last = call(&mut h, r).await;
    assert_eq!(last.statuses[0].code, OK);
    assert_eq!(last.statuses[0].limit_remaining, 0);
    let metrics = reqwest::get(h.debug("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"ratelimit_service_rate_limit_shadow_mode{domain="trial",key1="api_search"} 4"#
        ),
        "{metrics}"
    );
}

/// Example 6: a named limit is dropped when another matched limit replaces it.
async fn replaces_drops_the_replaced_limit(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: tiers
descriptors:
  - key: plan
    value: free
    rate_limit:
      name: free_plan
      unit: minute
      requests_per_unit: 1
  - key: customer
    value: acme
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: free_plan
",
        redis,
    )
    .await;
    let both = req(
        "tiers",
        vec![desc(&[("plan", "free")]), desc(&[("customer", "acme")])],
    );
    assert_eq!(oks(&mut h, &both, 5).await, 3);
    let r = call(&mut h, both).await;
    assert_eq!(r.statuses[0].code, OK);
    assert_eq!(
        r.statuses[0].current_limit, None,
        "replaced limit gets a bare OK"
    );
    assert_eq!(r.statuses[1].code, OVER);
    let alone = req("tiers", vec![desc(&[("plan", "free")])]);
    assert_eq!(oks(&mut h, &alone, 3).await, 1);
    let named = call(&mut h, alone).await;
    assert_eq!(
        named.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("free_plan")
    );
}

/// Example 7: wildcards; exact beats wildcard beats default key; `*` anywhere.
async fn wildcards_exact_first_then_wildcard_then_default(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: web
descriptors:
  - key: path
    value: /api/*/login
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /api/v1/login
    rate_limit:
      unit: minute
      requests_per_unit: 4
  - key: path
    value: /static/*
    rate_limit:
      unit: minute
      requests_per_unit: 6
  - key: path
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: tenant
    value: t-*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
",
        redis,
    )
    .await;
    let exact = req("web", vec![desc(&[("path", "/api/v1/login")])]);
    assert_eq!(oks(&mut h, &exact, 6).await, 4);
    let wild = req("web", vec![desc(&[("path", "/api/v2/login")])]);
    assert_eq!(oks(&mut h, &wild, 4).await, 2);
    let wild_other = req("web", vec![desc(&[("path", "/api/v3/login")])]);
    assert_eq!(
        oks(&mut h, &wild_other, 4).await,
        2,
        "each value its own counter"
    );
    let trailing = req("web", vec![desc(&[("path", "/static/app.js")])]);
    assert_eq!(oks(&mut h, &trailing, 8).await, 6);
    let default = req("web", vec![desc(&[("path", "/about")])]);
    assert_eq!(oks(&mut h, &default, 3).await, 1);
    // share_threshold: all tenants matching t-* share one counter.
    let t1 = req("web", vec![desc(&[("tenant", "t-1")])]);
    let t2 = req("web", vec![desc(&[("tenant", "t-2")])]);
    assert_eq!(oks(&mut h, &t1, 2).await, 2);
    assert_eq!(oks(&mut h, &t2, 3).await, 1);
}

/// `unlimited` answers OK with remaining u32::MAX; `requests_per_unit: 0` blocks.
async fn unlimited_and_zero_limits(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: lists
descriptors:
  - key: ip
    value: 203.0.113.7
    rate_limit:
      unlimited: true
  - key: ip
    value: 198.51.100.66
    rate_limit:
      unit: hour
      requests_per_unit: 0
",
        redis,
    )
    .await;
    let allow = call(&mut h, req("lists", vec![desc(&[("ip", "203.0.113.7")])])).await;
    assert_eq!(allow.overall_code, OK);
    assert_eq!(allow.statuses[0].limit_remaining, u32::MAX);
    assert_eq!(allow.statuses[0].current_limit, None);
    let block = call(&mut h, req("lists", vec![desc(&[("ip", "198.51.100.66")])])).await;
    assert_eq!(block.overall_code, OVER);
}

/// `hits_addend`: request-level (0 means 1), per-descriptor (0 means check only).
async fn hits_addend_request_and_descriptor_level(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: bytes
descriptors:
  - key: bucket
    rate_limit:
      unit: minute
      requests_per_unit: 10
",
        redis,
    )
    .await;
    let mut r = req("bytes", vec![desc(&[("bucket", "b")])]);
    r.hits_addend = 4;
    assert_eq!(call(&mut h, r.clone()).await.statuses[0].limit_remaining, 6);
    assert_eq!(call(&mut h, r.clone()).await.statuses[0].limit_remaining, 2);
    let over = call(&mut h, r).await;
    assert_eq!(over.overall_code, OVER, "12 > 10");
    let mut check = req("bytes", vec![desc(&[("bucket", "c")])]);
    check.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    for _ in 0..3 {
        let r = call(&mut h, check.clone()).await;
        assert_eq!(
            r.statuses[0].limit_remaining, 10,
            "check-only does not count"
        );
    }
    let mut seven = req("bytes", vec![desc(&[("bucket", "c")])]);
    seven.hits_addend = 1;
    seven.descriptors[0].hits_addend = Some(UInt64Value { value: 7 });
    assert_eq!(call(&mut h, seven).await.statuses[0].limit_remaining, 3);
}

/// A descriptor's `limit` override replaces the configured limit (domain must exist).
async fn request_overrides(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: dyn
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
        redis,
    )
    .await;
    let mut d = desc(&[("user", "u1")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 3, // HOUR in envoy.type.v3.RateLimitUnit
    });
    let r = req("dyn", vec![d.clone()]);
    assert_eq!(oks(&mut h, &r, 4).await, 2);
    let resp = call(&mut h, r).await;
    assert_eq!(
        resp.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit)),
        Some((2, 3))
    );
    let unknown = call(&mut h, req("nope", vec![d])).await;
    assert_eq!(unknown.overall_code, OK);
    assert_eq!(unknown.statuses[0].current_limit, None);
}

/// quota_mode descriptors only reject when all of them are over.
async fn quota_mode_overall_code(redis: Option<&RedisServer>) {
    let (mut h, _) = harness(
        "domain: quota
descriptors:
  - key: q1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: q2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
",
        redis,
    )
    .await;
    let r = req("quota", vec![desc(&[("q1", "a")]), desc(&[("q2", "a")])]);
    assert_eq!(call(&mut h, r.clone()).await.overall_code, OK);
    let second = call(&mut h, r.clone()).await;
    assert_eq!(second.statuses[0].code, OVER);
    assert_eq!(second.overall_code, OK, "q2 still has quota");
    let third = call(&mut h, r).await;
    assert_eq!(third.overall_code, OVER, "all quota descriptors over");
}

/// Bad requests come back as gRPC UNKNOWN with the reference's messages.
async fn errors_are_grpc_unknown(redis: Option<&RedisServer>) {
    let (mut h, _) = harness("domain: x\n", redis).await;
    let e = h
        .client
        .should_rate_limit(req("", vec![desc(&[("k", "v")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let e = h
        .client
        .should_rate_limit(req("x", vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");
    // An empty descriptor is not an error.
    let r = call(&mut h, req("x", vec![desc(&[])])).await;
    assert_eq!(r.overall_code, OK);
}
