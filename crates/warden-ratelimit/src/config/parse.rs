//! YAML text -> [`RlsConfig`], with the reference's checks and messages
//! (`src/config/config_impl.go` of envoyproxy/ratelimit).

use super::model::{Algorithm, DescriptorConfig, RateLimitConfig, RlsConfig, Unit};
use super::yaml_v2::Resolved;
use super::yaml_value::YamlValue;
use super::ConfigError;

/// The reference's `validKeys`, checked at every depth, plus warden's `algorithm` extension.
const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // From the reference's unit-multiplier change (`rate_limit.unit_multiplier`).
    "unit_multiplier",
    // warden extensions (see `super::extensions`).
    "algorithm",
    "ban",
];

/// Parses and validates one config file. `file_key` is the name used in messages
/// (the runtime key, e.g. `config.basic.yaml`).
pub fn parse_config(file_key: &str, text: &str) -> Result<RlsConfig, ConfigError> {
    let err = |message: String| ConfigError {
        file: file_key.to_owned(),
        message,
    };
    let root =
        YamlValue::load(text).map_err(|e| err(format!("error loading config file: yaml: {e}")))?;
    validate_keys(&root).map_err(err)?;
    let root_map = match &root {
        YamlValue::Map(m) => m.as_slice(),
        YamlValue::Null => &[],
        other => {
            return Err(err(format!(
                "error loading config file: yaml: cannot unmarshal !!{} into the config root",
                other.kind()
            )))
        }
    };
    let domain = opt_string(root_map, "domain")
        .map_err(err)?
        .unwrap_or_default();
    if domain.is_empty() {
        return Err(err("config file cannot have empty domain".into()));
    }
    let descriptors = descriptor_list(root_map).map_err(err)?;
    let config = RlsConfig {
        domain,
        descriptors,
    };
    check_descriptors(&format!("{}.", config.domain), &config.descriptors).map_err(err)?;
    Ok(config)
}

/// `validateYamlKeys`: string keys from the valid set, lists of maps, scalar leaves.
fn validate_keys(value: &YamlValue) -> Result<(), String> {
    match value {
        YamlValue::Map(entries) => {
            for (k, v) in entries {
                let key = match k {
                    YamlValue::Scalar {
                        text,
                        resolved: Resolved::Str,
                    } => text,
                    _ => {
                        return Err(format!(
                            "config error, key is not of type string: {}",
                            k.display()
                        ))
                    }
                };
                if !VALID_KEYS.contains(&key.as_str()) {
                    return Err(format!("config error, unknown key '{key}'"));
                }
                // metadata is free-form by design; ban has its own keys (checked when parsed).
                if key != "metadata" && key != "ban" {
                    validate_keys(v)?;
                }
            }
            Ok(())
        }
        YamlValue::Seq(items) => {
            for item in items {
                if !matches!(item, YamlValue::Map(_)) {
                    return Err(format!(
                        "config error, yaml file contains list of type other than map: {}",
                        item.display()
                    ));
                }
                validate_keys(item)?;
            }
            Ok(())
        }
        // Leaves yaml.v2 decodes to string, int or bool; floats, uint64s and timestamps fail.
        YamlValue::Null => Ok(()),
        YamlValue::Scalar { resolved, .. } => match resolved {
            Resolved::Str | Resolved::Int(_) | Resolved::Bool(_) | Resolved::Null => Ok(()),
            Resolved::Float(_) | Resolved::Uint(_) | Resolved::Timestamp => {
                Err("error checking config".into())
            }
        },
    }
}

fn get<'a>(map: &'a [(YamlValue, YamlValue)], key: &str) -> Option<&'a YamlValue> {
    map.iter()
        .rev() // last occurrence wins, like a Go map decode
        .find(|(k, _)| k.text() == Some(key))
        .map(|(_, v)| v)
}

/// yaml.v2's type error: the scalar's text as written, none for collections.
fn type_error(field: &str, value: &YamlValue, want: &str) -> String {
    let shown = value.text().map(|t| format!(" `{t}`")).unwrap_or_default();
    format!(
        "error loading config file: yaml: unmarshal errors: cannot unmarshal !!{}{shown} into {want} (field '{field}')",
        value.kind(),
    )
}

/// A yaml.v2 `string` field: any scalar's text as written (`yes`, `0x1F` stay as they are).
fn opt_string(map: &[(YamlValue, YamlValue)], field: &str) -> Result<Option<String>, String> {
    match get(map, field) {
        None | Some(YamlValue::Null) => Ok(None),
        Some(YamlValue::Scalar { text, .. }) => Ok(Some(text.clone())),
        Some(other) => Err(type_error(field, other, "string")),
    }
}

/// A yaml.v2 `bool` field: what resolves to a bool (`true`, `yes`, `on`, `y`, ...).
fn opt_bool(map: &[(YamlValue, YamlValue)], field: &str) -> Result<bool, String> {
    match get(map, field) {
        None | Some(YamlValue::Null) => Ok(false),
        Some(YamlValue::Scalar {
            resolved: Resolved::Bool(b),
            ..
        }) => Ok(*b),
        Some(other) => Err(type_error(field, other, "bool")),
    }
}

/// A yaml.v2 `uint32` field: what resolves to an int in range (`0x1F`, `1_000`, `0123`).
fn opt_u32(map: &[(YamlValue, YamlValue)], field: &str) -> Result<u32, String> {
    let value = get(map, field);
    let n = match value {
        None | Some(YamlValue::Null) => return Ok(0),
        Some(YamlValue::Scalar {
            resolved: Resolved::Int(i),
            ..
        }) => u32::try_from(*i).ok(),
        Some(YamlValue::Scalar {
            resolved: Resolved::Uint(u),
            ..
        }) => u32::try_from(*u).ok(),
        _ => None,
    };
    match (n, value) {
        (Some(n), _) => Ok(n),
        (None, Some(v)) => Err(type_error(field, v, "uint32")),
        (None, None) => Ok(0),
    }
}

/// `metadata`: a map (yaml.v2 `map[string]interface{}`), empty meaning none.
fn metadata(map: &[(YamlValue, YamlValue)]) -> Result<Option<serde_json::Value>, String> {
    let entries = match get(map, "metadata") {
        None | Some(YamlValue::Null) => return Ok(None),
        Some(YamlValue::Map(entries)) => entries,
        Some(other) => return Err(type_error("metadata", other, "map[string]interface {}")),
    };
    let mut out = serde_json::Map::new();
    for (k, v) in entries {
        // Top-level keys are decoded into Go strings (their text); nested ones are printed.
        let key = match k {
            YamlValue::Null => String::new(),
            YamlValue::Scalar { text, .. } => text.clone(),
            other => return Err(type_error("metadata", other, "string")),
        };
        let value = v
            .to_json()
            .map_err(|e| format!("error parsing metadata: {e}"))?;
        out.insert(key, value);
    }
    Ok((!out.is_empty()).then_some(serde_json::Value::Object(out)))
}

fn descriptor_list(map: &[(YamlValue, YamlValue)]) -> Result<Vec<DescriptorConfig>, String> {
    match get(map, "descriptors") {
        None | Some(YamlValue::Null) => Ok(Vec::new()),
        Some(YamlValue::Seq(items)) => items
            .iter()
            .map(|item| match item {
                YamlValue::Map(m) => descriptor(m),
                other => Err(type_error("descriptors", other, "descriptor")),
            })
            .collect(),
        Some(other) => Err(type_error("descriptors", other, "[]descriptor")),
    }
}

fn descriptor(map: &[(YamlValue, YamlValue)]) -> Result<DescriptorConfig, String> {
    let rate_limit = match get(map, "rate_limit") {
        None | Some(YamlValue::Null) => None,
        Some(YamlValue::Map(m)) => Some(rate_limit(m)?),
        Some(other) => return Err(type_error("rate_limit", other, "rate_limit")),
    };
    Ok(DescriptorConfig {
        key: opt_string(map, "key")?.unwrap_or_default(),
        value: opt_string(map, "value")?.filter(|v| !v.is_empty()),
        rate_limit,
        shadow_mode: opt_bool(map, "shadow_mode")?,
        quota_mode: opt_bool(map, "quota_mode")?,
        detailed_metric: opt_bool(map, "detailed_metric")?,
        value_to_metric: opt_bool(map, "value_to_metric")?,
        share_threshold: opt_bool(map, "share_threshold")?,
        metadata: metadata(map)?,
        ban: match get(map, "ban") {
            None | Some(YamlValue::Null) => None,
            Some(v) => Some(super::ban::parse_ban(v)?),
        },
        descriptors: descriptor_list(map)?,
    })
}

/// The unit is kept as text here; [`check_descriptors`] reports bad units with the reference's
/// message, so an invalid unit is encoded as `unit: None` plus `raw_unit`.
fn rate_limit(map: &[(YamlValue, YamlValue)]) -> Result<RateLimitConfig, String> {
    let unlimited = opt_bool(map, "unlimited")?;
    let raw_unit = opt_string(map, "unit")?.unwrap_or_default();
    let unit = Unit::parse(&raw_unit);
    if unlimited {
        if unit.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
    } else if unit.is_none() {
        return Err(format!("invalid rate limit unit '{raw_unit}'"));
    }
    let name = opt_string(map, "name")?.filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    match get(map, "replaces") {
        None | Some(YamlValue::Null) => {}
        Some(YamlValue::Seq(items)) => {
            for item in items {
                let YamlValue::Map(m) = item else {
                    return Err(type_error("replaces", item, "replaces"));
                };
                let replaced = opt_string(m, "name")?.unwrap_or_default();
                if replaced.is_empty() {
                    return Err("should not have an empty replaces entry".into());
                }
                if Some(&replaced) == name.as_ref() {
                    return Err("replaces should not contain name of same descriptor".into());
                }
                replaces.push(replaced);
            }
        }
        Some(other) => return Err(type_error("replaces", other, "[]replaces")),
    }
    let unit_multiplier = match get(map, "unit_multiplier") {
        None | Some(YamlValue::Null) => None,
        Some(_) => match opt_u32(map, "unit_multiplier")? {
            0 => return Err("invalid unit multiplier of 0".into()),
            n => Some(n),
        },
    };
    let algorithm = match opt_string(map, "algorithm")? {
        None => None,
        Some(text) => Some(Algorithm::parse(&text).ok_or_else(|| {
            format!("invalid rate limit algorithm '{text}' (want fixed_window or sliding_window)")
        })?),
    };
    Ok(RateLimitConfig {
        unit: if unlimited { None } else { unit },
        requests_per_unit: opt_u32(map, "requests_per_unit")?,
        unit_multiplier,
        unlimited,
        name,
        replaces,
        algorithm,
    })
}

/// Structural checks of `loadDescriptors`: empty keys, duplicate composite keys, share_threshold.
pub(crate) fn check_descriptors(
    parent_key: &str,
    descriptors: &[DescriptorConfig],
) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for d in descriptors {
        if d.key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let final_key = composite(d);
        let new_parent = format!("{parent_key}{final_key}");
        if !seen.insert(final_key.clone()) {
            return Err(format!("duplicate descriptor composite key '{new_parent}'"));
        }
        if d.share_threshold && !d.value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
            ));
        }
        if d.ban.is_some() {
            check_ban(d, &new_parent)?;
        }
        check_descriptors(&format!("{new_parent}."), &d.descriptors)?;
    }
    Ok(())
}

/// A ban needs a counted limit of its own to go over, and shadow mode never refuses.
fn check_ban(d: &DescriptorConfig, composite_key: &str) -> Result<(), String> {
    match &d.rate_limit {
        None => Err(format!(
            "ban on '{composite_key}' needs a rate_limit on the same descriptor"
        )),
        Some(rl) if rl.unlimited => Err(format!(
            "ban on '{composite_key}' cannot go with an unlimited rate_limit"
        )),
        Some(_) if d.shadow_mode => Err(format!(
            "ban on '{composite_key}' cannot go with shadow_mode (a shadow limit never refuses)"
        )),
        Some(_) => Ok(()),
    }
}

/// `key` or `key_value`: the map key of a descriptor at its level.
pub(crate) fn composite(d: &DescriptorConfig) -> String {
    match &d.value {
        Some(v) => format!("{}_{}", d.key, v),
        None => d.key.clone(),
    }
}
