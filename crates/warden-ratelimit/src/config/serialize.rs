//! [`RlsConfig`] -> YAML text in the reference format (what `warden ratelimit-config` writes).
//! Strings are emitted as JSON-style double-quoted scalars, which YAML reads back unchanged.

use super::model::{DescriptorConfig, RlsConfig};
use std::fmt::Write;

/// Renders one config file. `parse_config(to_yaml(c)) == c` for every valid config.
pub fn to_yaml(config: &RlsConfig) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "domain: {}", quote(&config.domain));
    if config.descriptors.is_empty() {
        out.push_str("descriptors: []\n");
    } else {
        out.push_str("descriptors:\n");
        for d in &config.descriptors {
            write_descriptor(&mut out, d, 1);
        }
    }
    out
}

fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

fn write_descriptor(out: &mut String, d: &DescriptorConfig, depth: usize) {
    let pad = "  ".repeat(depth);
    let _ = writeln!(out, "{pad}- key: {}", quote(&d.key));
    let pad = format!("{pad}  ");
    if let Some(value) = &d.value {
        let _ = writeln!(out, "{pad}value: {}", quote(value));
    }
    if let Some(rl) = &d.rate_limit {
        let _ = writeln!(out, "{pad}rate_limit:");
        if let Some(unit) = rl.unit {
            let _ = writeln!(out, "{pad}  unit: {}", unit.lower());
        }
        if !rl.unlimited {
            let _ = writeln!(out, "{pad}  requests_per_unit: {}", rl.requests_per_unit);
        }
        if let Some(m) = rl.unit_multiplier {
            let _ = writeln!(out, "{pad}  unit_multiplier: {m}");
        }
        if rl.unlimited {
            let _ = writeln!(out, "{pad}  unlimited: true");
        }
        if let Some(name) = &rl.name {
            let _ = writeln!(out, "{pad}  name: {}", quote(name));
        }
        if !rl.replaces.is_empty() {
            let _ = writeln!(out, "{pad}  replaces:");
            for r in &rl.replaces {
                let _ = writeln!(out, "{pad}    - name: {}", quote(r));
            }
        }
        if let Some(algorithm) = rl.algorithm {
            let _ = writeln!(out, "{pad}  algorithm: {}", algorithm.name());
        }
    }
    for (flag, name) in [
        (d.shadow_mode, "shadow_mode"),
        (d.quota_mode, "quota_mode"),
        (d.detailed_metric, "detailed_metric"),
        (d.value_to_metric, "value_to_metric"),
        (d.share_threshold, "share_threshold"),
    ] {
        if flag {
            let _ = writeln!(out, "{pad}{name}: true");
        }
    }
    if let Some(ban) = &d.ban {
        let durations: Vec<String> = ban
            .durations_ms
            .iter()
            .map(|ms| super::format_duration(*ms))
            .collect();
        let _ = writeln!(out, "{pad}ban:");
        let _ = writeln!(out, "{pad}  durations: [{}]", durations.join(", "));
        let _ = writeln!(
            out,
            "{pad}  forget_after: {}",
            super::format_duration(ban.forget_after_ms)
        );
    }
    if let Some(metadata) = &d.metadata {
        // JSON is a subset of YAML's flow style.
        let _ = writeln!(out, "{pad}metadata: {metadata}");
    }
    if !d.descriptors.is_empty() {
        let _ = writeln!(out, "{pad}descriptors:");
        for child in &d.descriptors {
            write_descriptor(out, child, depth + 2);
        }
    }
}
