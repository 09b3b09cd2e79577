//! The Telemetry API's `tracing` (telemetry.istio.io/v1): which provider reports, the sampling
//! percentage (`randomSamplingPercentage`), `disableSpanReporting`, and `customTags` (literal,
//! request header, or the proxy's environment). Istio merges the root namespace's Telemetry,
//! the workload namespace's and the one selecting the workload, the narrower field by field
//! ([`merge`]). Fields warden does not implement that would change what requests get (the
//! sampling by request id, a `match` on one side only, `targetRefs`) are errors at the field.

use crate::field_path::FieldPath;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a Telemetry says about tracing, and to which workloads.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TelemetryTracing {
    /// `selector.matchLabels`; empty: every workload of the namespace (the root's: the mesh).
    pub match_labels: BTreeMap<String, String>,
    pub tracing: Tracing,
}

/// One Telemetry's `tracing` (its entries folded into one: Istio allows one per mode).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Tracing {
    /// `providers[].name`; empty: the mesh's `defaultProviders.tracing`.
    pub providers: Vec<String>,
    pub random_sampling_percentage: Option<f64>,
    pub disable_span_reporting: Option<bool>,
    pub custom_tags: BTreeMap<String, CustomTag>,
}

/// A `customTags` value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum CustomTag {
    Literal(String),
    /// A request header, or `default` when the request has none.
    Header {
        name: String,
        default: String,
    },
    /// The proxy's environment variable, or `default`.
    Environment {
        name: String,
        default: String,
    },
}

/// Problems at a field: (path, message).
pub type Problems = Vec<(FieldPath, String)>;

/// A Telemetry `spec`'s tracing (`None` without `tracing`).
pub fn parse_telemetry(spec: &Value) -> Result<Option<TelemetryTracing>, Problems> {
    let Some(list) = spec.get("tracing") else {
        return Ok(None);
    };
    let base = FieldPath::keys(&["spec", "tracing"]);
    let mut problems = Vec::new();
    if spec.get("targetRefs").is_some() || spec.get("targetRef").is_some() {
        problems.push((
            FieldPath::keys(&["spec", "targetRefs"]),
            "`targetRefs` with `tracing` is not implemented by warden (use `selector`)".into(),
        ));
    }
    let match_labels = spec
        .get("selector")
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut tracing = Tracing::default();
    match list.as_array() {
        Some(entries) => {
            for (i, entry) in entries.iter().enumerate() {
                entry_into(entry, &base.index(i), &mut tracing, &mut problems);
            }
        }
        None => problems.push((base, "must be a list".into())),
    }
    if problems.is_empty() {
        Ok(Some(TelemetryTracing {
            match_labels,
            tracing,
        }))
    } else {
        Err(problems)
    }
}

fn entry_into(entry: &Value, at: &FieldPath, t: &mut Tracing, problems: &mut Problems) {
    let Some(map) = entry.as_object() else {
        problems.push((at.clone(), "must be a map".into()));
        return;
    };
    for (key, value) in map {
        let field = at.key(key.as_str());
        match key.as_str() {
            "providers" => match value.as_array() {
                Some(list) => {
                    t.providers = list
                        .iter()
                        .map(|p| p.get("name").and_then(Value::as_str).unwrap_or_default())
                        .map(str::to_owned)
                        .collect();
                    if t.providers.len() > 1 {
                        problems.push((
                            field,
                            "only one tracing provider is supported per workload".into(),
                        ));
                    }
                }
                None => problems.push((field, "must be a list".into())),
            },
            "randomSamplingPercentage" => match value.as_f64() {
                Some(p) if (0.0..=100.0).contains(&p) => t.random_sampling_percentage = Some(p),
                _ => problems.push((field, "must be a number in the range [0, 100]".into())),
            },
            "disableSpanReporting" => match value.as_bool() {
                Some(b) => t.disable_span_reporting = Some(b),
                None => problems.push((field, "must be true or false".into())),
            },
            "customTags" => match value.as_object() {
                Some(tags) => {
                    for (name, tag) in tags {
                        match custom_tag(tag) {
                            Ok(tag) => {
                                t.custom_tags.insert(name.clone(), tag);
                            }
                            Err(why) => problems.push((field.key(name.as_str()), why)),
                        }
                    }
                }
                None => problems.push((field, "must be a map".into())),
            },
            // Every request through a gateway or either side of a sidecar is traced by the
            // proxy that serves it: CLIENT_AND_SERVER is what warden does.
            "match" => {
                let mode = value.get("mode").and_then(Value::as_str);
                if !matches!(mode, None | Some("CLIENT_AND_SERVER")) {
                    problems.push((
                        field.key("mode"),
                        format!(
                            "`{}` is not implemented by warden (every side is traced: \
                             CLIENT_AND_SERVER)",
                            mode.unwrap_or_default()
                        ),
                    ));
                }
            }
            // Warden draws a random number per request; deciding by the request id (Envoy's
            // default) is not implemented, and it decides which requests are sampled.
            "useRequestIdForTraceSampling" if value.as_bool() == Some(false) => {}
            "useRequestIdForTraceSampling" => problems.push((
                field,
                "sampling by the request id is not implemented by warden (it draws a random \
                 number per request); set it to false"
                    .into(),
            )),
            other => problems.push((field, format!("`{other}` is not implemented by warden"))),
        }
    }
}

fn custom_tag(tag: &Value) -> Result<CustomTag, String> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let kinds: Vec<&String> = tag
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    match kinds.as_slice() {
        [k] if *k == "literal" => text(&tag["literal"], "value")
            .map(CustomTag::Literal)
            .ok_or_else(|| "literal needs a `value`".into()),
        [k] if *k == "header" => Ok(CustomTag::Header {
            name: text(&tag["header"], "name")
                .filter(|n| !n.is_empty())
                .ok_or("header needs a `name`")?
                .to_ascii_lowercase(),
            default: text(&tag["header"], "defaultValue").unwrap_or_default(),
        }),
        [k] if *k == "environment" => Ok(CustomTag::Environment {
            name: text(&tag["environment"], "name")
                .filter(|n| !n.is_empty())
                .ok_or("environment needs a `name`")?,
            default: text(&tag["environment"], "defaultValue").unwrap_or_default(),
        }),
        _ => Err("a custom tag is one of `literal`, `header` or `environment`".into()),
    }
}

/// Istio's merge: `narrower` (namespace over root, workload over namespace) wins field by
/// field; custom tags are merged by name.
pub fn merge(wider: &Tracing, narrower: &Tracing) -> Tracing {
    let mut custom_tags = wider.custom_tags.clone();
    custom_tags.extend(narrower.custom_tags.clone());
    Tracing {
        providers: if narrower.providers.is_empty() {
            wider.providers.clone()
        } else {
            narrower.providers.clone()
        },
        random_sampling_percentage: narrower
            .random_sampling_percentage
            .or(wider.random_sampling_percentage),
        disable_span_reporting: narrower
            .disable_span_reporting
            .or(wider.disable_span_reporting),
        custom_tags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tracing_entries_are_read() {
        let t = parse_telemetry(&json!({
            "selector": {"matchLabels": {"app": "api"}},
            "tracing": [{
                "providers": [{"name": "otel"}],
                "randomSamplingPercentage": 10.5,
                "disableSpanReporting": false,
                "useRequestIdForTraceSampling": false,
                "match": {"mode": "CLIENT_AND_SERVER"},
                "customTags": {
                    "team": {"literal": {"value": "payments"}},
                    "user": {"header": {"name": "X-User", "defaultValue": "anonymous"}},
                    "pod": {"environment": {"name": "POD_NAME"}}
                }
            }]
        }))
        .unwrap()
        .unwrap();
        assert_eq!(t.match_labels.get("app").map(String::as_str), Some("api"));
        let t = t.tracing;
        assert_eq!(t.providers, ["otel"]);
        assert_eq!(t.random_sampling_percentage, Some(10.5));
        assert_eq!(t.disable_span_reporting, Some(false));
        assert_eq!(t.custom_tags["team"], CustomTag::Literal("payments".into()));
        assert_eq!(
            t.custom_tags["user"],
            CustomTag::Header {
                name: "x-user".into(),
                default: "anonymous".into()
            }
        );
        assert_eq!(
            t.custom_tags["pod"],
            CustomTag::Environment {
                name: "POD_NAME".into(),
                default: String::new()
            }
        );
        assert_eq!(parse_telemetry(&json!({"metrics": []})).unwrap(), None);
    }

    #[test]
    fn what_warden_does_not_do_is_an_error_at_the_field() {
        for (spec, field, says) in [
            (
                json!({"tracing": [{"randomSamplingPercentage": 101}]}),
                "spec.tracing[0].randomSamplingPercentage",
                "[0, 100]",
            ),
            (
                json!({"tracing": [{"match": {"mode": "SERVER"}}]}),
                "spec.tracing[0].match.mode",
                "CLIENT_AND_SERVER",
            ),
            (
                json!({"tracing": [{"useRequestIdForTraceSampling": true}]}),
                "spec.tracing[0].useRequestIdForTraceSampling",
                "request id",
            ),
            (
                json!({"tracing": [{"customTags": {"x": {"literal": {}}}}]}),
                "spec.tracing[0].customTags.x",
                "value",
            ),
            (
                json!({"tracing": [{"customTags": {"x": {"metadata": {}}}}]}),
                "spec.tracing[0].customTags.x",
                "one of",
            ),
            (
                json!({"tracing": [{"enableIstioTags": false}]}),
                "spec.tracing[0].enableIstioTags",
                "not implemented",
            ),
            (
                json!({"targetRefs": [{"kind": "Gateway"}], "tracing": [{}]}),
                "spec.targetRefs",
                "selector",
            ),
        ] {
            let problems = parse_telemetry(&spec).unwrap_err();
            assert!(
                problems
                    .iter()
                    .any(|(f, m)| f.to_string() == field && m.contains(says)),
                "{spec}: {problems:?}"
            );
        }
    }

    #[test]
    fn narrower_telemetry_wins_field_by_field() {
        let root = Tracing {
            providers: vec!["otel".into()],
            random_sampling_percentage: Some(1.0),
            disable_span_reporting: None,
            custom_tags: [("a".to_string(), CustomTag::Literal("root".into()))].into(),
        };
        let ns = Tracing {
            random_sampling_percentage: Some(50.0),
            custom_tags: [
                ("a".to_string(), CustomTag::Literal("ns".into())),
                ("b".to_string(), CustomTag::Literal("ns".into())),
            ]
            .into(),
            ..Tracing::default()
        };
        let m = merge(&root, &ns);
        assert_eq!(m.providers, ["otel"]);
        assert_eq!(m.random_sampling_percentage, Some(50.0));
        assert_eq!(m.custom_tags["a"], CustomTag::Literal("ns".into()));
        assert_eq!(m.custom_tags.len(), 2);
    }
}
