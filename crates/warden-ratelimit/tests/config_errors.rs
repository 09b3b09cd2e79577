//! The reference's validation errors, with its messages (`"<file-key>: <message>"`), and the
//! runtime-directory rules (keys, dotfiles, duplicate domains, merging).

use warden_ratelimit::config::{load_config_set, parse_config, to_yaml, ConfigSource};
use warden_testkit::TempDir;

fn error_of(yaml: &str) -> String {
    parse_config("config.test.yaml", yaml)
        .expect_err("config should be rejected")
        .to_string()
}

#[test]
fn reference_messages() {
    let cases: &[(&str, &str)] = &[
        ("descriptors: []\n", "config file cannot have empty domain"),
        ("domain: \"\"\n", "config file cannot have empty domain"),
        (
            "domain: d\ndescriptors:\n  - value: v\n",
            "descriptor has empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    descriptors:\n      - key: k2\n      - key: k2\n",
            "duplicate descriptor composite key 'd.k_v.k2'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n",
            "invalid rate limit unit 'foo'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
            "invalid rate limit unit ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: me\n",
            "replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    0.25: x\n",
            "config error, key is not of type string: 0.25",
        ),
        (
            "domain: d\ndescriptors:\n  - a\n",
            "config error, yaml file contains list of type other than map: a",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: 0.5\n",
            "error checking config",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'",
        ),
    ];
    for (yaml, message) in cases {
        assert_eq!(
            error_of(yaml),
            format!("config.test.yaml: {message}"),
            "for:\n{yaml}"
        );
    }
}

#[test]
fn yaml_syntax_errors_are_prefixed_like_the_reference() {
    let e = error_of("domain: d\ndescriptors:\n  - key: [unclosed\n");
    assert!(
        e.starts_with("config.test.yaml: error loading config file: yaml: "),
        "{e}"
    );
}

#[test]
fn every_key_and_unit_of_the_reference_is_accepted() {
    let yaml = "domain: all_keys
descriptors:
  - key: a
    value: v
    detailed_metric: true
    rate_limit:
      name: first
      unit: SECOND
      requests_per_unit: 1
  - key: b
    value: \"x*\"
    share_threshold: true
    value_to_metric: true
    quota_mode: true
    shadow_mode: true
    metadata:
      team: payments
      nested: {depth: 2}
    rate_limit:
      unit: Minute
      requests_per_unit: 2
      replaces:
        - name: first
  - key: c
    descriptors:
      - key: h
        rate_limit: {unit: hour, requests_per_unit: 3}
      - key: d
        rate_limit: {unit: day, requests_per_unit: 4}
      - key: w
        rate_limit: {unit: week, requests_per_unit: 5}
      - key: m
        rate_limit: {unit: month, requests_per_unit: 6}
      - key: y
        rate_limit: {unit: year, requests_per_unit: 7}
      - key: u
        rate_limit: {unlimited: true}
      - key: n
        value: 42
";
    let config = parse_config("config.all.yaml", yaml).expect("valid");
    assert_eq!(config.descriptors.len(), 3);
    // The serializer round-trips everything.
    let text = to_yaml(&config);
    let again = parse_config("again", &text).expect("serialized config parses");
    assert_eq!(again, config, "{text}");
}

#[test]
fn runtime_keys_dotfiles_and_duplicate_domains() {
    // The seed's ConfigMap volume: config.yaml -> ..data/config.yaml, ..data -> ..2024_01.
    let dir = TempDir::new("cfg").unwrap();
    let mounted = dir.path().join("ratelimit/config");
    let stamp = mounted.join("..2024_01_01");
    std::fs::create_dir_all(&stamp).unwrap();
    std::fs::write(stamp.join("config.yaml"), "domain: ratelimit\n").unwrap();
    std::os::unix::fs::symlink("..2024_01_01", mounted.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/config.yaml", mounted.join("config.yaml")).unwrap();
    let source = |ignore_dotfiles| ConfigSource::Runtime {
        root: dir.path().to_path_buf(),
        subdirectory: "ratelimit".into(),
        app_directory: "config".into(),
        watch_root: false,
        ignore_dotfiles,
    };
    let set = load_config_set(&source(true), false).expect("loads with dotfiles ignored");
    assert_eq!(set.domains.keys().collect::<Vec<_>>(), vec!["ratelimit"]);
    // Without RUNTIME_IGNOREDOTFILES the `..data` copies are loaded too (#367).
    let err = load_config_set(&source(false), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("duplicate domain 'ratelimit' in config file"),
        "{err}"
    );
    // With RUNTIME_WATCH_ROOT=false keys are relative to the app directory.
    assert!(
        err.starts_with("..data.config.yaml: "),
        "file key is the runtime key: {err}"
    );

    // Keys are relative paths with `/` -> `.`; errors name them.
    std::fs::write(
        mounted.join("..2024_01_01/broken.yaml"),
        "domain: x\nbad: 1\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("..data/broken.yaml", mounted.join("broken.yaml")).unwrap();
    let err = load_config_set(&source(true), false)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "broken.yaml: config error, unknown key 'bad'");
}

#[test]
fn merge_domain_config_adds_descriptors() {
    let dir = TempDir::new("merge").unwrap();
    dir.write("a.yaml", "domain: d\ndescriptors:\n  - key: a\n")
        .unwrap();
    dir.write("b.yaml", "domain: d\ndescriptors:\n  - key: b\n")
        .unwrap();
    let source = ConfigSource::Paths(vec![dir.path().to_path_buf()]);
    let err = load_config_set(&source, false).unwrap_err().to_string();
    assert!(
        err.ends_with("duplicate domain 'd' in config file"),
        "{err}"
    );
    let set = load_config_set(&source, true).expect("merged");
    assert_eq!(set.domains["d"].descriptors.len(), 2);
    dir.write("c.yaml", "domain: d\ndescriptors:\n  - key: a\n")
        .unwrap();
    let err = load_config_set(&source, true).unwrap_err().to_string();
    assert!(
        err.ends_with("duplicate descriptor composite key 'd.a'"),
        "{err}"
    );
}

#[test]
fn both_watch_root_modes_load_only_the_app_directory() {
    let dir = TempDir::new("root").unwrap();
    dir.write("rl/config/one.yaml", "domain: one\n").unwrap();
    dir.write("rl/other/two.yaml", "domain: two\n").unwrap();
    let source = |watch_root| ConfigSource::Runtime {
        root: dir.path().to_path_buf(),
        subdirectory: "rl".into(),
        app_directory: "config".into(),
        watch_root,
        ignore_dotfiles: true,
    };
    let set = load_config_set(&source(true), false).unwrap();
    assert_eq!(set.domains.keys().collect::<Vec<_>>(), vec!["one"]);
    let set = load_config_set(&source(false), false).unwrap();
    assert_eq!(set.domains.keys().collect::<Vec<_>>(), vec!["one"]);
}
