//! Config YAML scalars read as the reference's parser (Go yaml.v2) reads them: `key`, `value`,
//! `domain` and `name` are strings holding the text as written (`yes` stays `yes`, `0x1F`
//! stays `0x1F`), `requests_per_unit` and the flags take yaml.v2's YAML 1.1 types (`0x1F` is
//! 31, `0123` is octal 83, `on` is true), and leaves yaml.v2 decodes to floats, timestamps or
//! integers beyond int64 fail the reference's key check.

mod common;

use common::*;
use warden_ratelimit::config::parse_config;

const CONFIG: &str = "domain: yes
descriptors:
  - key: on
    value: yes
    rate_limit: {unit: minute, requests_per_unit: 0x1F}
  - key: hex
    value: 0x1F
    rate_limit: {unit: minute, requests_per_unit: 1_000}
  - key: octal
    value: 0123
    rate_limit: {unit: minute, requests_per_unit: 0123}
  - key: n
    value: True
    shadow_mode: on
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: under
    value: 1_000
    rate_limit: {unit: minute, requests_per_unit: 0b11}
  - key: meta
    metadata: {flag: y, count: 0123, big: 1_000, text: '0123'}
    rate_limit: {unit: minute, requests_per_unit: 5}
";

#[tokio::test]
async fn keys_and_values_are_matched_as_written() {
    let mut h = start_with(
        &[("c.yaml", CONFIG)],
        None,
        |s| s.limiter.response_dynamic_metadata = true,
        None,
    )
    .await;
    let limit_of = async |h: &mut Harness, domain: &str, k: &str, v: &str| {
        let resp = h
            .client
            .should_rate_limit(req(domain, vec![desc(&[(k, v)])]))
            .await
            .unwrap()
            .into_inner();
        resp.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    // The domain is "yes", not "true"; `on: yes` is key "on", value "yes".
    assert_eq!(limit_of(&mut h, "yes", "on", "yes").await, Some(31));
    assert_eq!(limit_of(&mut h, "yes", "on", "true").await, None);
    assert_eq!(limit_of(&mut h, "true", "on", "yes").await, None);
    // Numbers as values keep their spelling; as limits they are yaml.v2 integers.
    assert_eq!(limit_of(&mut h, "yes", "hex", "0x1F").await, Some(1000));
    assert_eq!(limit_of(&mut h, "yes", "hex", "31").await, None);
    assert_eq!(limit_of(&mut h, "yes", "octal", "0123").await, Some(83));
    assert_eq!(limit_of(&mut h, "yes", "under", "1_000").await, Some(3));
    // `n: True`: key "n", value "True" (case kept); shadow_mode `on` is true, so over its
    // limit of 0 the call still passes.
    let resp = h
        .client
        .should_rate_limit(req("yes", vec![desc(&[("n", "True")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.statuses[0].code, OK, "shadow_mode: on");
    assert_eq!(limit_of(&mut h, "yes", "n", "true").await, None);

    let rlconfig = reqwest::get(h.debug("/rlconfig"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "yes.on_yes: unit=MINUTE requests_per_unit=31, shadow_mode: false, quota_mode: false",
        "yes.hex_0x1F: unit=MINUTE requests_per_unit=1000, shadow_mode: false, quota_mode: false",
        "yes.octal_0123: unit=MINUTE requests_per_unit=83, shadow_mode: false, quota_mode: false",
        "yes.n_True: unit=MINUTE requests_per_unit=0, shadow_mode: true, quota_mode: false",
    ] {
        assert!(
            rlconfig.lines().any(|l| l == line),
            "missing {line} in\n{rlconfig}"
        );
    }

    // Metadata is free-form: yaml.v2's types (y is true, 0123 is 83), quoted text stays text.
    let resp = h
        .client
        .should_rate_limit(req("yes", vec![desc(&[("meta", "x")])]))
        .await
        .unwrap()
        .into_inner();
    let metadata =
        warden_ratelimit::dynamic_metadata::struct_to_json(resp.dynamic_metadata.as_ref().unwrap());
    assert_eq!(
        metadata["metadata"],
        serde_json::json!({"flag": true, "count": 83, "big": 1000, "text": "0123"})
    );
}

fn error_of(yaml: &str) -> String {
    parse_config("c.yaml", yaml)
        .expect_err("rejected")
        .to_string()
}

#[test]
fn leaves_yaml_v2_cannot_decode_to_string_int_or_bool_fail_the_key_check() {
    for leaf in [
        "1.5",
        "08",
        "1e3",
        "2001-12-14",
        "9223372036854775808",
        ".inf",
    ] {
        let yaml = format!("domain: d\ndescriptors:\n  - key: k\n    value: {leaf}\n");
        assert_eq!(error_of(&yaml), "c.yaml: error checking config", "{leaf}");
    }
    // The same texts quoted are strings.
    let ok = parse_config(
        "c.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: '1.5'\n  - key: k2\n    value: \"2001-12-14\"\n",
    )
    .expect("quoted leaves are strings");
    assert_eq!(ok.descriptors[0].value.as_deref(), Some("1.5"));
}

#[test]
fn typed_fields_take_yaml_v2_types() {
    // A bool field does not take a string yaml.v2 does not read as a bool.
    let err = error_of("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: tRue\n");
    assert!(
        err.contains("cannot unmarshal !!str `tRue` into bool"),
        "{err}"
    );
    // A quoted number is a string, not a uint32.
    let err = error_of(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n",
    );
    assert!(
        err.contains("cannot unmarshal !!str `5` into uint32"),
        "{err}"
    );
    // Map keys that yaml.v2 reads as non-strings are refused by the key check.
    assert_eq!(
        error_of("domain: d\ndescriptors:\n  - key: k\n    yes: 1\n"),
        "c.yaml: config error, key is not of type string: true"
    );
    // The unit is a string field: `unit: on` is the text "on".
    assert_eq!(
        error_of("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: on, requests_per_unit: 1}\n"),
        "c.yaml: invalid rate limit unit 'on'"
    );
    // Anchors and merge keys work as in yaml.v2.
    let config = parse_config(
        "c.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 0x10}\n  - key: b\n    rate_limit: {<<: *rl, unit: minute}\n",
    )
    .expect("anchors");
    let b = config.descriptors[1].rate_limit.as_ref().unwrap();
    assert_eq!(
        (b.requests_per_unit, b.unit.map(|u| u.lower())),
        (16, Some("minute"))
    );
}
