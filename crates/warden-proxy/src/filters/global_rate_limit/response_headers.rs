//! Headers derived from an RLS answer: Envoy's `x-ratelimit-*` (DRAFT_VERSION_03) from the
//! status with the least remaining quota, and the RLS's own header lists.

use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use http::{HeaderMap, HeaderName, HeaderValue};

pub const X_ENVOY_RATELIMITED: HeaderName = HeaderName::from_static("x-envoy-ratelimited");
pub use warden_local_ratelimit::{X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET};

/// `RateLimitResponse.RateLimit.Unit` in seconds (Envoy's `ratelimit_headers.cc`).
fn unit_seconds(unit: i32) -> Option<u64> {
    Some(match unit {
        1 => 1,
        2 => 60,
        3 => 3_600,
        4 => 86_400,
        5 => 30 * 86_400,
        6 => 365 * 86_400,
        7 => 7 * 86_400,
        _ => return None,
    })
}

/// `x-ratelimit-limit/remaining/reset` from the statuses, or nothing if none carries a limit.
pub fn x_ratelimit(statuses: &[DescriptorStatus], out: &mut HeaderMap) {
    let Some(min) = statuses
        .iter()
        .filter(|s| s.current_limit.is_some())
        .min_by_key(|s| s.limit_remaining)
    else {
        return;
    };
    let Some(limit) = &min.current_limit else {
        return;
    };
    let mut value = limit.requests_per_unit.to_string();
    for s in statuses {
        let Some(l) = &s.current_limit else { continue };
        let Some(window) = unit_seconds(l.unit) else {
            continue;
        };
        value.push_str(&format!(", {};w={window}", l.requests_per_unit));
        if !l.name.is_empty() {
            value.push_str(&format!(";name=\"{}\"", l.name));
        }
    }
    if let Ok(v) = HeaderValue::from_str(&value) {
        out.insert(X_RATELIMIT_LIMIT, v);
    }
    out.insert(
        X_RATELIMIT_REMAINING,
        HeaderValue::from(min.limit_remaining),
    );
    let reset = min
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds.max(0));
    out.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
}

/// Append the RLS's header list (invalid names or values are skipped, as Envoy drops them).
pub fn append_rls_headers(headers: &[PbHeader], out: &mut HeaderMap) {
    for h in headers {
        let value = if h.raw_value.is_empty() {
            HeaderValue::from_str(&h.value).ok()
        } else {
            HeaderValue::from_bytes(&h.raw_value).ok()
        };
        if let (Ok(name), Some(value)) = (HeaderName::from_bytes(h.key.as_bytes()), value) {
            out.append(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
    use envoy_types::pb::google::protobuf::Duration;

    fn status(rpu: u32, unit: i32, remaining: u32, reset: i64) -> DescriptorStatus {
        DescriptorStatus {
            code: 1,
            current_limit: Some(RateLimit {
                requests_per_unit: rpu,
                unit,
                name: String::new(),
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration {
                seconds: reset,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn headers_from_the_least_remaining_status() {
        let mut h = HeaderMap::new();
        x_ratelimit(&[status(100, 2, 40, 30), status(10, 1, 3, 1)], &mut h);
        assert_eq!(h[&X_RATELIMIT_LIMIT], "10, 100;w=60, 10;w=1");
        assert_eq!(h[&X_RATELIMIT_REMAINING], "3");
        assert_eq!(h[&X_RATELIMIT_RESET], "1");
    }

    #[test]
    fn no_limits_no_headers() {
        let mut h = HeaderMap::new();
        x_ratelimit(&[DescriptorStatus::default()], &mut h);
        assert!(h.is_empty());
    }
}
