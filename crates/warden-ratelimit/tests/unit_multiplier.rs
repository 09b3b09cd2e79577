//! `unit_multiplier` as envoyproxy/ratelimit's unit-multiplier change defines it: the window is
//! `unit × unit_multiplier` seconds, epoch-aligned like every window (the Redis key's time bucket
//! is `now / window * window`, its TTL the window plus jitter, `duration_until_reset` is
//! `window - now % window`), absent means 1 and an explicit 0 is refused with
//! `invalid unit multiplier of 0`. The configs are the reference's `test/config/unit_multiplier.yaml`
//! and `test/config/zero_unit_multiplier.yaml`, recreated here.

mod common;

use common::*;
use redis::Commands;
use std::sync::Arc;
use warden_ratelimit::config::{parse_config, ConfigSet, Unit};
use warden_ratelimit::matcher::Snapshot;
use warden_ratelimit::stats::Stats;
use warden_ratelimit::ManualClock;
use warden_testkit::RedisServer;

const UNIT_MULTIPLIER_YAML: &str = "domain: test-domain
descriptors:
  # some unit_multiplier
  - key: key1
    rate_limit:
      unit: minute
      requests_per_unit: 20
      unit_multiplier: 5

  # no unit_multiplier
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 25
";

const ZERO_UNIT_MULTIPLIER_YAML: &str = "domain: test-domain
descriptors:
  # 0 unit_multiplier
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 5
      unit_multiplier: 0
";

/// A 5-minute boundary (1_700_000_100 is divisible by 300).
const T0_SECS: u64 = 1_700_000_100;

fn snapshot(yaml: &str) -> Snapshot {
    let config = parse_config("unit_multiplier.yaml", yaml).expect("config");
    let mut set = ConfigSet::default();
    set.domains.insert(config.domain.clone(), config);
    Snapshot::compile(set, &Stats::new())
}

/// The reference's `TestUnitMultiplier`.
#[test]
fn reference_test_unit_multiplier() {
    let s = snapshot(UNIT_MULTIPLIER_YAML);
    let key1 = s.get_limit("test-domain", &[("key1", "")]).expect("key1");
    assert_eq!(key1.requests_per_unit, 20);
    assert_eq!(key1.unit, Some(Unit::Minute));
    assert_eq!(key1.unit_multiplier, 5);
    let key2 = s.get_limit("test-domain", &[("key2", "")]).expect("key2");
    assert_eq!(key2.requests_per_unit, 25);
    assert_eq!(key2.unit, Some(Unit::Minute));
    assert_eq!(key2.unit_multiplier, 1, "absent means 1");
}

/// The reference's `TestZeroUnitMultiplier`, plus values yaml.v2 cannot put in a uint32.
#[test]
fn reference_test_zero_unit_multiplier() {
    let err = parse_config("zero_unit_multiplier.yaml", ZERO_UNIT_MULTIPLIER_YAML)
        .expect_err("0 is refused");
    assert_eq!(
        err.to_string(),
        "zero_unit_multiplier.yaml: invalid unit multiplier of 0"
    );
    for bad in ["-1", "1.5", "4294967296", "five"] {
        let yaml = ZERO_UNIT_MULTIPLIER_YAML
            .replace("unit_multiplier: 0", &format!("unit_multiplier: {bad}"));
        assert!(
            parse_config("c.yaml", &yaml).is_err(),
            "unit_multiplier: {bad}"
        );
    }
}

#[test]
fn window_is_unit_times_multiplier() {
    let rows = [
        (Unit::Second, 1, 1),
        (Unit::Second, 30, 30),
        (Unit::Minute, 5, 300),
        (Unit::Hour, 2, 7_200),
        (Unit::Day, 7, 604_800),
        // A defensive 0 (never from a parsed config) counts as 1, as in the reference.
        (Unit::Minute, 0, 60),
    ];
    for (unit, multiplier, window) in rows {
        assert_eq!(unit.window(multiplier), window, "{unit} x {multiplier}");
    }
}

#[test]
fn config_round_trips_through_yaml() {
    let config = parse_config("c.yaml", UNIT_MULTIPLIER_YAML).expect("config");
    let again = parse_config("c.yaml", &warden_ratelimit::to_yaml(&config)).expect("again");
    assert_eq!(config, again);
    assert_eq!(
        config.descriptors[0]
            .rate_limit
            .as_ref()
            .and_then(|r| r.unit_multiplier),
        Some(5)
    );
}

/// 20 per 5 minutes through the running service on Redis: the 21st call in a 5-minute window is
/// refused, the count carries over the minute boundaries inside it, a new 5-minute window starts
/// afresh; key, TTL and `duration_until_reset` as the reference computes them.
#[tokio::test]
async fn five_minute_window_on_redis() {
    let redis = RedisServer::start().expect("redis");
    let clock = ManualClock::new((T0_SECS + 70) * 1000);
    let mut h = start_with(
        &[("config.yaml", UNIT_MULTIPLIER_YAML)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let r = req("test-domain", vec![desc(&[("key1", "x")])]);
    for i in 0..10 {
        let resp = h
            .client
            .should_rate_limit(r.clone())
            .await
            .expect("call")
            .into_inner();
        assert_eq!(resp.overall_code, OK, "call {i}");
        let status = &resp.statuses[0];
        assert_eq!(status.limit_remaining, 20 - i - 1);
        assert_eq!(
            status.duration_until_reset.as_ref().map(|d| d.seconds),
            Some(300 - 70),
            "window - now % window"
        );
    }
    // Two minutes later (another minute, the same 5-minute window): ten more fit, then no more.
    clock.advance_millis(120_000);
    for i in 0..10 {
        let resp = h
            .client
            .should_rate_limit(r.clone())
            .await
            .expect("call")
            .into_inner();
        assert_eq!(resp.overall_code, OK, "call {}", 10 + i);
    }
    let resp = h
        .client
        .should_rate_limit(r.clone())
        .await
        .expect("call")
        .into_inner();
    assert_eq!(resp.overall_code, OVER);
    assert_eq!(
        resp.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds),
        Some(300 - 190)
    );

    let mut conn = redis::Client::open(redis.url())
        .expect("client")
        .get_connection()
        .expect("conn");
    let key = format!("test-domain_key1_x_{T0_SECS}");
    let count: u64 = conn.get(&key).expect("count");
    assert_eq!(count, 21);
    let ttl: i64 = conn.ttl(&key).expect("ttl");
    assert!(
        (295..=300 + 300).contains(&ttl),
        "ttl {ttl} = window + jitter"
    );

    // The next 5-minute window starts afresh.
    clock.set_millis((T0_SECS + 300) * 1000);
    let resp = h
        .client
        .should_rate_limit(r.clone())
        .await
        .expect("call")
        .into_inner();
    assert_eq!(resp.overall_code, OK);
    assert_eq!(resp.statuses[0].limit_remaining, 19);
    assert_eq!(
        resp.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds),
        Some(300)
    );
    let next: u64 = conn
        .get(format!("test-domain_key1_x_{}", T0_SECS + 300))
        .expect("next");
    assert_eq!(next, 1);

    // key2 has no multiplier: a plain minute.
    let r2 = req("test-domain", vec![desc(&[("key2", "y")])]);
    let resp = h
        .client
        .should_rate_limit(r2)
        .await
        .expect("call")
        .into_inner();
    assert_eq!(
        resp.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds),
        Some(60 - (T0_SECS as i64 + 300) % 60)
    );
    let minute = (T0_SECS + 300) / 60 * 60;
    let plain: u64 = conn
        .get(format!("test-domain_key2_y_{minute}"))
        .expect("plain");
    assert_eq!(plain, 1);
}

/// The memory backend counts the same windows.
#[tokio::test]
async fn five_minute_window_in_memory() {
    let clock = ManualClock::new((T0_SECS + 299) * 1000);
    let mut h = start_with(
        &[("config.yaml", UNIT_MULTIPLIER_YAML)],
        None,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let r = req("test-domain", vec![desc(&[("key1", "x")])]);
    for _ in 0..20 {
        let resp = h
            .client
            .should_rate_limit(r.clone())
            .await
            .expect("call")
            .into_inner();
        assert_eq!(resp.overall_code, OK);
    }
    let resp = h
        .client
        .should_rate_limit(r.clone())
        .await
        .expect("call")
        .into_inner();
    assert_eq!(resp.overall_code, OVER);
    assert_eq!(
        resp.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds),
        Some(1)
    );
    clock.advance_millis(1_000);
    let resp = h
        .client
        .should_rate_limit(r)
        .await
        .expect("call")
        .into_inner();
    assert_eq!(resp.overall_code, OK, "a new 5-minute window");
}
