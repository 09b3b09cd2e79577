//! warden extension `ban` on a descriptor: a client that goes over the descriptor's limit is
//! refused entirely for a ban period, longer with each repeat (the last period repeats), and
//! its strikes are forgotten after a quiet period. See `docs/ratelimit-bans.md`.
//!
//! ```yaml
//! - key: remote_address
//!   rate_limit: {unit: minute, requests_per_unit: 300}
//!   ban:
//!     durations: [2m, 5m, 10m]
//!     forget_after: 1h
//! ```

use super::yaml_v2::Resolved;
use super::yaml_value::YamlValue;

/// The keys a `ban` block may hold.
pub(crate) const BAN_KEYS: &[&str] = &["durations", "forget_after"];

/// A descriptor's ban schedule, in milliseconds (the decisions are [`crate::ban::schedule`]).
pub use warden_config::ban::BanSchedule as BanConfig;

/// `1h30m`, `2m`, `45s`, `500ms`, `1d`: whole numbers with units (ms, s, m, h, d), summed.
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(scale)?)?;
    }
    Some(total)
}

/// The shortest text [`parse_duration`] reads back as `ms`.
pub fn format_duration(ms: u64) -> String {
    let units = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ];
    let mut out = String::new();
    let mut rest = ms;
    for (name, scale) in units {
        if rest >= scale {
            out.push_str(&format!("{}{name}", rest / scale));
            rest %= scale;
        }
    }
    if rest > 0 || out.is_empty() {
        out.push_str(&format!("{rest}ms"));
    }
    out
}

fn duration_field(field: &str, value: &YamlValue) -> Result<u64, String> {
    let text = match value {
        YamlValue::Scalar {
            text,
            resolved: Resolved::Str | Resolved::Int(_),
        } => text,
        other => {
            return Err(format!(
                "ban: {field} must be a duration like 2m or 1h, not {}",
                other.display()
            ))
        }
    };
    match parse_duration(text) {
        Some(0) => Err(format!("ban: {field} must be longer than 0, not '{text}'")),
        Some(ms) => Ok(ms),
        None => Err(format!(
            "ban: {field} '{text}' is not a duration (whole numbers with ms, s, m, h or d, \
             e.g. 2m, 1h30m)"
        )),
    }
}

/// The `ban` block of a descriptor.
pub(crate) fn parse_ban(value: &YamlValue) -> Result<BanConfig, String> {
    let YamlValue::Map(entries) = value else {
        return Err(format!(
            "ban: must be a map with durations and forget_after, not {}",
            value.display()
        ));
    };
    let mut durations = None;
    let mut forget = None;
    for (k, v) in entries {
        match k.text() {
            Some("durations") => durations = Some(v),
            Some("forget_after") => forget = Some(v),
            Some(other) => {
                return Err(format!(
                    "ban: unknown key '{other}' (want {})",
                    BAN_KEYS.join(", ")
                ))
            }
            None => return Err(format!("ban: key is not a string: {}", k.display())),
        }
    }
    let durations_ms = match durations {
        Some(YamlValue::Seq(items)) if !items.is_empty() => items
            .iter()
            .map(|item| duration_field("durations", item))
            .collect::<Result<Vec<_>, _>>()?,
        Some(YamlValue::Seq(_)) | None | Some(YamlValue::Null) => {
            return Err("ban: durations needs at least one duration, e.g. [2m, 5m, 10m]".into())
        }
        Some(other) => {
            return Err(format!(
                "ban: durations must be a list like [2m, 5m, 10m], not {}",
                other.display()
            ))
        }
    };
    let forget_after_ms = match forget {
        Some(v) if !matches!(v, YamlValue::Null) => duration_field("forget_after", v)?,
        _ => return Err("ban: forget_after is required (e.g. forget_after: 1h)".into()),
    };
    Ok(BanConfig {
        durations_ms,
        forget_after_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        let rows: &[(&str, Option<u64>)] = &[
            ("2m", Some(120_000)),
            ("1h", Some(3_600_000)),
            ("1h30m", Some(5_400_000)),
            ("45s", Some(45_000)),
            ("500ms", Some(500)),
            ("1d", Some(86_400_000)),
            ("0s", Some(0)),
            ("", None),
            ("2", None),
            ("m", None),
            ("2 m", None),
            ("1.5h", None),
            ("-1m", None),
            ("99999999999999999999d", None),
        ];
        for (text, want) in rows {
            assert_eq!(parse_duration(text), *want, "{text:?}");
        }
    }

    #[test]
    fn durations_format_round_trip() {
        for (ms, text) in [
            (120_000, "2m"),
            (5_400_000, "1h30m"),
            (500, "500ms"),
            (61_500, "1m1s500ms"),
            (0, "0ms"),
            (86_400_000, "1d"),
        ] {
            assert_eq!(format_duration(ms), text);
            assert_eq!(parse_duration(text), Some(ms));
        }
    }
}
