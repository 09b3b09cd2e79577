//! YAML text -> [`RlsConfig`], with the reference's checks and messages
//! (`src/config/config_impl.go` of envoyproxy/ratelimit).

use super::model::{Algorithm, DescriptorConfig, RateLimitConfig, RlsConfig, Unit};
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
    "algorithm",
];

/// Parses and validates one config file. `file_key` is the name used in messages
/// (the runtime key, e.g. `config.basic.yaml`).
pub fn parse_config(file_key: &str, text: &str) -> Result<RlsConfig, ConfigError> {
    let err = |message: String| ConfigError {
        file: file_key.to_owned(),
        message,
    };
    let root: YamlValue = if text.trim().is_empty() {
        YamlValue::Null
    } else {
        serde_saphyr::from_str(text)
            .map_err(|e| err(format!("error loading config file: yaml: {e}")))?
    };
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
                let YamlValue::Str(key) = k else {
                    return Err(format!(
                        "config error, key is not of type string: {}",
                        k.display()
                    ));
                };
                if !VALID_KEYS.contains(&key.as_str()) {
                    return Err(format!("config error, unknown key '{key}'"));
                }
                // metadata is free-form by design.
                if key != "metadata" {
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
        YamlValue::Str(_) | YamlValue::Int(_) | YamlValue::Bool(_) | YamlValue::Null => Ok(()),
        YamlValue::Float(_) => Err("error checking config".into()),
    }
}

fn get<'a>(map: &'a [(YamlValue, YamlValue)], key: &str) -> Option<&'a YamlValue> {
    map.iter()
        .rev() // last occurrence wins, like a Go map decode
        .find(|(k, _)| matches!(k, YamlValue::Str(s) if s == key))
        .map(|(_, v)| v)
}

fn type_error(field: &str, value: &YamlValue, want: &str) -> String {
    format!(
        "error loading config file: yaml: unmarshal errors: cannot unmarshal !!{} `{}` into {want} (field '{field}')",
        value.kind(),
        value.display()
    )
}

fn opt_string(map: &[(YamlValue, YamlValue)], field: &str) -> Result<Option<String>, String> {
    match get(map, field) {
        None | Some(YamlValue::Null) => Ok(None),
        Some(YamlValue::Str(s)) => Ok(Some(s.clone())),
        Some(YamlValue::Int(i)) => Ok(Some(i.to_string())),
        Some(YamlValue::Bool(b)) => Ok(Some(b.to_string())),
        Some(other) => Err(type_error(field, other, "string")),
    }
}

fn opt_bool(map: &[(YamlValue, YamlValue)], field: &str) -> Result<bool, String> {
    match get(map, field) {
        None | Some(YamlValue::Null) => Ok(false),
        Some(YamlValue::Bool(b)) => Ok(*b),
        Some(other) => Err(type_error(field, other, "bool")),
    }
}

fn opt_u32(map: &[(YamlValue, YamlValue)], field: &str) -> Result<u32, String> {
    match get(map, field) {
        None | Some(YamlValue::Null) => Ok(0),
        Some(YamlValue::Int(i)) => {
            u32::try_from(*i).map_err(|_| type_error(field, &YamlValue::Int(*i), "uint32"))
        }
        Some(other) => Err(type_error(field, other, "uint32")),
    }
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
        metadata: get(map, "metadata")
            .filter(|v| **v != YamlValue::Null)
            .map(YamlValue::to_json),
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
    let algorithm = match opt_string(map, "algorithm")? {
        None => None,
        Some(text) => Some(Algorithm::parse(&text).ok_or_else(|| {
            format!("invalid rate limit algorithm '{text}' (want fixed_window or sliding_window)")
        })?),
    };
    Ok(RateLimitConfig {
        unit: if unlimited { None } else { unit },
        requests_per_unit: opt_u32(map, "requests_per_unit")?,
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
        check_descriptors(&format!("{new_parent}."), &d.descriptors)?;
    }
    Ok(())
}

/// `key` or `key_value`: the map key of a descriptor at its level.
pub(crate) fn composite(d: &DescriptorConfig) -> String {
    match &d.value {
        Some(v) => format!("{}_{}", d.key, v),
        None => d.key.clone(),
    }
}
