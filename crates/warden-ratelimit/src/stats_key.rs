//! Which stats key a call counts under, as the reference's `GetLimit` builds it
//! (`src/config/config_impl.go`):
//! - a limit without `detailed_metric`: per level `key`, plus `_value` where the value is the
//!   request's for an exact match, the pattern (with its `*`) for a wildcard match, and
//!   nothing for a default key; a level with `value_to_metric` uses the request's value
//!   instead (a wildcard level with `share_threshold` keeps its pattern). Without
//!   `value_to_metric` anywhere on the path this is the config key, precompiled.
//! - a limit with `detailed_metric`: `key_value` of every entry from the request (the `_` even
//!   for an empty value), or, when a wildcard level on the path has `share_threshold`, its
//!   pattern there and `key[_value]` elsewhere.
//! - a request override: `key[_value]` of every entry.

use crate::limiter::RateLimitDescriptor;
use crate::matcher::Limit;

/// `domain.k1_v1.k2` for a request override (`descriptorKey`).
pub fn override_key(domain: &str, descriptor: &RateLimitDescriptor) -> String {
    let mut key = domain.to_owned();
    for e in &descriptor.entries {
        key.push('.');
        key.push_str(&e.key);
        if !e.value.is_empty() {
            key.push('_');
            key.push_str(&e.value);
        }
    }
    key
}

/// The key this call counts under when it is not the limit's precompiled one.
pub fn request_key(
    domain: &str,
    descriptor: &RateLimitDescriptor,
    limit: &Limit,
) -> Option<String> {
    let levels = descriptor.entries.iter().zip(&limit.levels);
    let shared = |l: &crate::matcher::Level| l.wildcard && l.share_threshold;
    let mut key = domain.to_owned();
    if limit.detailed_metric {
        let any_shared = limit.levels.iter().any(shared);
        for (entry, level) in levels {
            key.push('.');
            key.push_str(&entry.key);
            match (&level.config_value, any_shared) {
                (Some(pattern), true) if shared(level) => {
                    key.push('_');
                    key.push_str(pattern);
                }
                (_, true) if entry.value.is_empty() => {}
                _ => {
                    key.push('_');
                    key.push_str(&entry.value);
                }
            }
        }
        return Some(key);
    }
    if !limit.levels.iter().any(|l| l.value_to_metric) {
        return None;
    }
    for (entry, level) in levels {
        key.push('.');
        key.push_str(&entry.key);
        let value = match &level.config_value {
            Some(pattern) if level.wildcard => {
                if level.value_to_metric && !level.share_threshold {
                    entry.value.as_str()
                } else {
                    pattern.as_str()
                }
            }
            Some(_) => entry.value.as_str(),
            None if level.value_to_metric => entry.value.as_str(),
            None => "",
        };
        if !value.is_empty() {
            key.push('_');
            key.push_str(value);
        }
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_config, ConfigSet};
    use crate::limiter::Entry;
    use crate::matcher::Snapshot;
    use crate::stats::Stats;

    const CONFIG: &str = "domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
          - key: detailed
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
      - key: plain
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: action
    value: read*
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: files
    value: files/*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: path/*
    descriptors:
      - key: type
        rate_limit: {unit: second, requests_per_unit: 1}
";

    /// The key a call with `entries` counts under.
    fn key(entries: &[(&str, &str)]) -> String {
        let mut set = ConfigSet::default();
        let config = parse_config("c.yaml", CONFIG).expect("config");
        set.domains.insert(config.domain.clone(), config);
        let snapshot = Snapshot::compile(set, &Stats::new());
        let limit = snapshot.get_limit("d", entries).expect("a limit");
        let descriptor = RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        };
        request_key("d", &descriptor, &limit).unwrap_or_else(|| limit.full_key.clone())
    }

    #[test]
    fn value_to_metric_per_level() {
        let rows: &[(&[(&str, &str)], &str)] = &[
            // Flagged default keys take the request's values; the leaf without it does not.
            (
                &[("route", "draw"), ("method", "GET"), ("subject", "123")],
                "d.route_draw.method_GET.subject",
            ),
            // An empty value adds no `_`.
            (
                &[("route", ""), ("method", "GET"), ("subject", "123")],
                "d.route.method_GET.subject",
            ),
            // Only the flagged middle level.
            (&[("k1", "X"), ("k2", "Y"), ("k3", "Z")], "d.k1.k2_Y.k3"),
            (&[("k1", "X"), ("plain", "Y")], "d.k1.plain"),
            // A flagged wildcard level takes the request's value.
            (&[("action", "readfile")], "d.action_readfile"),
            // ...unless it also shares its threshold: the pattern stays.
            (&[("files", "files/a.txt")], "d.files_files/*"),
            // An unflagged wildcard keeps its pattern.
            (&[("path", "path/x"), ("type", "pdf")], "d.path_path/*.type"),
        ];
        for (entries, want) in rows {
            assert_eq!(key(entries), *want, "{entries:?}");
        }
    }

    #[test]
    fn detailed_metric_uses_the_request_but_shared_patterns() {
        assert_eq!(
            key(&[("route", "draw"), ("method", "GET"), ("detailed", "123")]),
            "d.route_draw.method_GET.detailed_123"
        );
        assert_eq!(
            key(&[("route", "draw"), ("method", ""), ("detailed", "")]),
            "d.route_draw.method_.detailed_",
            "every entry gets its `_`"
        );
        assert_eq!(
            key(&[("service", "svc/user"), ("endpoint", "get")]),
            "d.service_svc/*.endpoint_get"
        );
        assert_eq!(
            key(&[("service", "svc/user"), ("endpoint", "")]),
            "d.service_svc/*.endpoint",
            "with a shared pattern, empty values add no `_`"
        );
    }

    #[test]
    fn overrides_name_only_values_they_have() {
        let descriptor = RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "a".into(),
                    value: "1".into(),
                },
                Entry {
                    key: "b".into(),
                    value: String::new(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(override_key("d", &descriptor), "d.a_1.b");
    }
}
