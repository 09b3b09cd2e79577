//! `RESPONSE_DYNAMIC_METADATA=true`: answers carry the reference's `dynamic_metadata` over
//! gRPC and `/json`.

mod common;

use common::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::json;
use warden_ratelimit::dynamic_metadata::struct_to_json;

const CONFIG: &str = "domain: meta
descriptors:
  - key: team
    value: a
    metadata:
      owner: team-a
      limits: {tier: gold, burst: 10}
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: team
    value: b
    metadata:
      owner: team-b
      limits: {tier: silver, region: eu}
      tags: [x, y]
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: blocked
    metadata: {owner: nobody}
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    metadata: {free: true}
    rate_limit: {unlimited: true}
";

async fn harness(enabled: bool) -> Harness {
    start_with(
        &[("c.yaml", CONFIG)],
        None,
        |s| s.limiter.response_dynamic_metadata = enabled,
        None,
    )
    .await
}

#[tokio::test]
async fn grpc_answers_carry_the_request_and_the_passed_limits_metadata() {
    let mut h = harness(true).await;
    let mut with_hits = desc(&[("team", "b")]);
    with_hits.hits_addend = Some(UInt64Value { value: 0 });
    let mut overridden = desc(&[("other", "x")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 10,
        unit: 2,
    });
    let mut r = req(
        "meta",
        vec![
            desc(&[("team", "a")]),
            with_hits,
            desc(&[("blocked", "z")]),
            desc(&[("free", "1")]),
            overridden,
        ],
    );
    r.hits_addend = 3;
    let resp = h.client.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(resp.overall_code, OVER, "blocked is over its limit of 0");
    let metadata = struct_to_json(resp.dynamic_metadata.as_ref().expect("dynamic_metadata"));
    assert_eq!(
        metadata,
        json!({
            "domain": "meta",
            "hitsAddend": 3,
            "descriptors": [
                {"entries": ["team=a"]},
                {"entries": ["team=b"], "hitsAddend": 0},
                {"entries": ["blocked=z"]},
                {"entries": ["free=1"]},
                {"entries": ["other=x"], "limit": "requests_per_unit:10 unit:MINUTE"},
            ],
            // team=a first: its values win; maps merge; the over-limit and unlimited
            // descriptors add nothing. Metadata is free-form, so YAML 1.1 types apply, as
            // yaml.v2 decodes it: an unquoted `y` is `true`.
            "metadata": {
                "owner": "team-a",
                "limits": {"tier": "gold", "burst": 10, "region": "eu"},
                "tags": ["x", true],
            },
        })
    );
}

#[tokio::test]
async fn json_answers_carry_it_too() {
    let h = harness(true).await;
    let body =
        json!({"domain": "meta", "descriptors": [{"entries": [{"key": "team", "value": "a"}]}]});
    let reply: serde_json::Value = reqwest::Client::new()
        .post(h.http("/json"))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reply["dynamicMetadata"],
        json!({
            "domain": "meta",
            "descriptors": [{"entries": ["team=a"]}],
            "metadata": {"owner": "team-a", "limits": {"tier": "gold", "burst": 10}},
        }),
        "{reply}"
    );
}

#[tokio::test]
async fn off_by_default() {
    let mut h = harness(false).await;
    let resp = h
        .client
        .should_rate_limit(req("meta", vec![desc(&[("team", "a")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.dynamic_metadata, None);
    let vars = [("RESPONSE_DYNAMIC_METADATA", "true")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let s = warden_ratelimit::Settings::from_env_map(&vars).unwrap();
    assert!(s.limiter.response_dynamic_metadata);
}
