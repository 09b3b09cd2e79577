//! Stats keys as envoyproxy/ratelimit's `GetLimit` computes them, from its own tests
//! (`test/config/config_test.go`: `TestShareThreshold` over `share_threshold.yaml`,
//! `TestDetailedMetric`, `TestWildcardStatsBehavior`), recreated here: each row is a request
//! decided by the limiter and the stats key whose `total_hits` it counted under.

use warden_ratelimit::config::{parse_config, ConfigSet};
use warden_ratelimit::limiter::{Entry, RateLimitDescriptor};
use warden_ratelimit::{RateLimitRequest, RateLimiter};

/// The reference's `test/config/share_threshold.yaml`.
const SHARE_THRESHOLD_YAML: &str = "domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 200
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 300
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit:
          unit: minute
          requests_per_unit: 80
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit:
              unit: minute
              requests_per_unit: 120
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit:
              unit: minute
              requests_per_unit: 150
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 80
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 60
";

/// `TestDetailedMetric`'s configs, as YAML (domain `nested`).
const DETAILED_PARENT_ONLY: &str = "domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        rate_limit: {unit: minute, requests_per_unit: 5}
";
const DETAILED_NONE: &str = "domain: nested
descriptors:
  - key: key-1
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        rate_limit: {unit: minute, requests_per_unit: 5}
";
const DETAILED_BOTH: &str = "domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
";
const DETAILED_REALISTIC: &str = "domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
";

/// `TestWildcardStatsBehavior`'s configs.
const WILD_NO_FLAGS: &str = "domain: test-domain
descriptors:
  - {key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: mid, value: foo*bar*, rate_limit: {unit: minute, requests_per_unit: 10}}
";
const WILD_VALUE_TO_METRIC: &str = "domain: test-domain
descriptors:
  - {key: wild, value: foo*, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: mid, value: foo*bar*, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
";
const WILD_SHARED: &str = "domain: test-domain
descriptors:
  - {key: wild, value: foo*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 10}}
";
const WILD_SHARED_VALUE_TO_METRIC: &str = "domain: test-domain
descriptors:
  - {key: wild, value: foo*, share_threshold: true, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
";
const WILD_OTHER_VALUE_TO_METRIC: &str = "domain: test-domain
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {unit: minute, requests_per_unit: 10}
";

/// A config, the request's entries, the stats key they count under.
type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

fn limiter(yaml: &str) -> RateLimiter {
    let config = parse_config("config.yaml", yaml).expect("config");
    let mut set = ConfigSet::default();
    set.domains.insert(config.domain.clone(), config);
    RateLimiter::in_memory(set)
}

/// Decides `entries` once on `yaml`; the stats key it counted under must be `want`.
async fn assert_key(yaml: &str, entries: &[(&str, &str)], want: &str) {
    let limiter = limiter(yaml);
    let domain = limiter
        .snapshot()
        .and_then(|s| s.config().domains.keys().next().cloned())
        .expect("domain");
    let request = RateLimitRequest {
        domain: domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let response = limiter.decide(&request).await.expect("decide");
    assert!(
        response.statuses[0].current_limit.is_some(),
        "{entries:?} matches a limit"
    );
    let hits = limiter.stats().limit_stats(&domain, want).total_hits.get();
    assert_eq!(hits, 1, "{entries:?} should count under {want}");
}

#[tokio::test]
async fn share_threshold_yaml() {
    let rows: &[(&[(&str, &str)], &str)] = &[
        (&[("files", "files/a.pdf")], "test-domain.files_files/*"),
        (&[("files", "files/b.csv")], "test-domain.files_files/*"),
        (
            &[("route", "api/v1"), ("method", "GET")],
            "test-domain.route_api/*.method",
        ),
        (
            &[("service", "svc/user"), ("endpoint", "get")],
            "test-domain.service_svc/*.endpoint_get",
        ),
        (
            &[("nested", "parent"), ("files", "nested/file1.txt")],
            "test-domain.nested_parent.files_nested/*",
        ),
        (
            &[("files", "top/file1.txt"), ("files", "nested/file1.txt")],
            "test-domain.files_top/*.files_nested/*",
        ),
        (
            &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
            "test-domain.path_path/*.file_file/*.type",
        ),
        (
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ],
            "test-domain.user_user/*.resource_res/*.action",
        ),
        (&[("file", "test1")], "test-domain.file_test1"),
        (&[("file", "test23")], "test-domain.file_test*"),
        (
            &[("midpath", "/api-beta-v1")],
            "test-domain.midpath_/api*v1",
        ),
        (
            &[("multiroute", "svcXXXepYYYrpc")],
            "test-domain.multiroute_svc*ep*rpc",
        ),
        (&[("midroute", "/api/v2")], "test-domain.midroute_/api*v2"),
        (
            &[("tenant", "t99prod"), ("resource", "resBBBv2")],
            "test-domain.tenant_t*prod.resource_res*v2",
        ),
    ];
    for (entries, want) in rows {
        assert_key(SHARE_THRESHOLD_YAML, entries, want).await;
    }
}

#[tokio::test]
async fn detailed_metric() {
    let rows: &[Row] = &[
        (
            DETAILED_PARENT_ONLY,
            &[("key-1", "value-1")],
            "nested.key-1_value-1",
        ),
        (DETAILED_NONE, &[("key-1", "value-1")], "nested.key-1"),
        (
            DETAILED_BOTH,
            &[("key-1", "value-1"), ("key-2", "value-2")],
            "nested.key-1_value-1.key-2_value-2",
        ),
        (
            DETAILED_NONE,
            &[("key-1", "value-1"), ("key-2", "value-2")],
            "nested.key-1.key-2",
        ),
        (
            DETAILED_REALISTIC,
            &[("key_1", "value-for-key-1")],
            "nested.key_1_value-for-key-1",
        ),
        (
            DETAILED_REALISTIC,
            &[("key_2", "key-2-value")],
            "nested.key_2_key-2-value",
        ),
        (
            DETAILED_REALISTIC,
            &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
            "nested.key_2_key-2-value.key_3_requested-key3-value",
        ),
    ];
    for (yaml, entries, want) in rows {
        assert_key(yaml, entries, want).await;
    }
}

#[tokio::test]
async fn wildcard_stats_behavior() {
    let rows: &[Row] = &[
        (WILD_NO_FLAGS, &[("wild", "foo1")], "test-domain.wild_foo*"),
        (
            WILD_NO_FLAGS,
            &[("mid", "foo123bar456")],
            "test-domain.mid_foo*bar*",
        ),
        (
            WILD_VALUE_TO_METRIC,
            &[("wild", "foo1")],
            "test-domain.wild_foo1",
        ),
        (
            WILD_VALUE_TO_METRIC,
            &[("mid", "foo123bar456")],
            "test-domain.mid_foo123bar456",
        ),
        (WILD_SHARED, &[("wild", "foo1")], "test-domain.wild_foo*"),
        (
            WILD_SHARED_VALUE_TO_METRIC,
            &[("wild", "foo1")],
            "test-domain.wild_foo*",
        ),
        (
            WILD_OTHER_VALUE_TO_METRIC,
            &[("wild", "foo1"), ("other", "bar"), ("limit", "X")],
            "test-domain.wild_foo*.other_bar.limit",
        ),
    ];
    for (yaml, entries, want) in rows {
        assert_key(yaml, entries, want).await;
    }
}

/// A request longer than the config's path gets no limit (the reference applies a limit only
/// at the request's depth) and counts under no key.
#[tokio::test]
async fn longer_descriptors_than_the_rule_match_nothing() {
    let limiter = limiter(DETAILED_NONE);
    let request = RateLimitRequest {
        domain: "nested".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: ["key-1", "key-2", "key-3"]
                .iter()
                .map(|k| Entry {
                    key: (*k).into(),
                    value: "v".into(),
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let response = limiter.decide(&request).await.expect("decide");
    assert!(response.statuses[0].current_limit.is_none());
    for key in [
        "nested.key-1",
        "nested.key-1.key-2",
        "nested.key-1_v.key-2_v.key-3_v",
    ] {
        assert_eq!(
            limiter.stats().limit_stats("nested", key).total_hits.get(),
            0,
            "{key}"
        );
    }
}
