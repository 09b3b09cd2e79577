//! Which descriptor and limit of a rate limit service's OVER_LIMIT answer limited a request,
//! named for the access log and `/ratelimit/top`: `descriptor[key=value,...]-limit[N/unit]`.
//! Built from the answer cache's key (the descriptors as sent) only when a request is limited.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use warden_ratelimit::RateLimitResponse;

/// The service's OVER_LIMIT status code.
const OVER_LIMIT: i32 = 2;

/// The first over-limit descriptor of `resp`, named from `key` (see `cache_key`: each
/// descriptor `|`, each entry `LEN:keyLEN:value`), and its limit when the service said it.
pub fn limited_rule(key: &str, resp: &RateLimitResponse) -> String {
    let descriptors = descriptors_of(key);
    let at = resp
        .statuses
        .iter()
        .position(|s| s.code == OVER_LIMIT)
        .unwrap_or(0);
    let mut out = String::from("descriptor[");
    if let Some(entries) = descriptors.get(at) {
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
    }
    out.push(']');
    if let Some(limit) = resp.statuses.get(at).and_then(|s| s.current_limit.as_ref()) {
        let unit = unit_name(limit.unit);
        out.push_str("-limit[");
        if !limit.name.is_empty() {
            out.push_str(&limit.name);
            out.push(':');
        }
        out.push_str(&format!("{}/{unit}", limit.requests_per_unit));
        out.push(']');
    }
    out
}

/// A limit's unit as envoyproxy/ratelimit's config writes it.
fn unit_name(unit: i32) -> &'static str {
    match Unit::try_from(unit) {
        Ok(Unit::Second) => "second",
        Ok(Unit::Minute) => "minute",
        Ok(Unit::Hour) => "hour",
        Ok(Unit::Day) => "day",
        Ok(Unit::Month) => "month",
        Ok(Unit::Year) => "year",
        Ok(Unit::Week) => "week",
        _ => "unknown",
    }
}

/// The descriptors of a cache key, each a list of (key, value).
fn descriptors_of(key: &str) -> Vec<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    let mut rest = key;
    while let Some(after) = rest.strip_prefix('|') {
        let mut entries = Vec::new();
        rest = after;
        while !rest.is_empty() && !rest.starts_with('|') {
            let Some((k, after)) = counted(rest) else {
                return out;
            };
            let Some((v, after)) = counted(after) else {
                return out;
            };
            entries.push((k, v));
            rest = after;
        }
        out.push(entries);
    }
    out
}

/// `LEN:text` at the start of `s`: the text and what follows it.
fn counted(s: &str) -> Option<(&str, &str)> {
    let (len, after) = s.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let text = after.get(..len)?;
    Some((text, &after[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        DescriptorStatus, RateLimit,
    };

    fn pb_status(code: i32, limit: Option<(&str, u32, i32)>) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: limit.map(|(name, requests_per_unit, unit)| RateLimit {
                name: name.into(),
                requests_per_unit,
                unit,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn names_the_over_limit_descriptor_and_its_limit() {
        let key = "|11:generic_key3:api|14:remote_address9:127.0.0.57:a|b:c:d1:|";
        let cases = [
            (
                vec![pb_status(1, None), pb_status(2, Some(("", 10, 2)))],
                "descriptor[remote_address=127.0.0.5,a|b:c:d=|]-limit[10/minute]",
            ),
            (
                vec![pb_status(2, Some(("per-ip", 1, 1))), pb_status(1, None)],
                "descriptor[generic_key=api]-limit[per-ip:1/second]",
            ),
            (vec![], "descriptor[generic_key=api]"),
        ];
        for (statuses, want) in cases {
            let resp = RateLimitResponse {
                overall_code: 2,
                statuses,
                ..Default::default()
            };
            assert_eq!(limited_rule(key, &resp), want);
        }
    }

    #[test]
    fn a_broken_key_names_what_it_could_read() {
        assert_eq!(descriptors_of("|3:ab"), Vec::<Vec<(&str, &str)>>::new());
        assert_eq!(descriptors_of(""), Vec::<Vec<(&str, &str)>>::new());
        assert_eq!(descriptors_of("||1:a1:b"), vec![vec![], vec![("a", "b")]]);
    }
}
