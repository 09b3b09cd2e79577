//! Which outcomes of an attempt are retried: Envoy's `retry_on` conditions as Istio sets them
//! from a VirtualService's `retries.retryOn` (status codes in the list become
//! `retriable-status-codes`), and Istio's default when a route says nothing.

use crate::core::local_reply::ResponseFlag;
use http::Response;
use std::time::Duration;

/// The conditions, a bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Conditions(u32);

impl Conditions {
    const FIVE_XX: u32 = 1;
    const GATEWAY_ERROR: u32 = 1 << 1;
    const RESET: u32 = 1 << 2;
    const CONNECT_FAILURE: u32 = 1 << 3;
    const RETRIABLE_4XX: u32 = 1 << 4;
    const REFUSED_STREAM: u32 = 1 << 5;
    const RETRIABLE_STATUS_CODES: u32 = 1 << 6;
    const ENVOY_RATELIMITED: u32 = 1 << 7;
    const GRPC_CANCELLED: u32 = 1 << 8;
    const GRPC_DEADLINE_EXCEEDED: u32 = 1 << 9;
    const GRPC_INTERNAL: u32 = 1 << 10;
    const GRPC_RESOURCE_EXHAUSTED: u32 = 1 << 11;
    const GRPC_UNAVAILABLE: u32 = 1 << 12;
    const RESET_BEFORE_REQUEST: u32 = 1 << 13;

    fn has(self, bits: u32) -> bool {
        self.0 & bits != 0
    }
}

/// Envoy's names. `retriable-headers` needs `retriable_headers`, which Istio has no field for,
/// and `http3-post-connect-failure` needs HTTP/3: both are accepted and never match, as in
/// Envoy configured by Istio.
const NAMES: &[(&str, u32)] = &[
    ("5xx", Conditions::FIVE_XX),
    ("gateway-error", Conditions::GATEWAY_ERROR),
    ("reset", Conditions::RESET),
    ("reset-before-request", Conditions::RESET_BEFORE_REQUEST),
    ("connect-failure", Conditions::CONNECT_FAILURE),
    ("retriable-4xx", Conditions::RETRIABLE_4XX),
    ("refused-stream", Conditions::REFUSED_STREAM),
    ("retriable-status-codes", Conditions::RETRIABLE_STATUS_CODES),
    ("envoy-ratelimited", Conditions::ENVOY_RATELIMITED),
    ("cancelled", Conditions::GRPC_CANCELLED),
    ("deadline-exceeded", Conditions::GRPC_DEADLINE_EXCEEDED),
    ("internal", Conditions::GRPC_INTERNAL),
    ("resource-exhausted", Conditions::GRPC_RESOURCE_EXHAUSTED),
    ("unavailable", Conditions::GRPC_UNAVAILABLE),
    ("retriable-headers", 0),
    ("http3-post-connect-failure", 0),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOn {
    conditions: Conditions,
    status_codes: Vec<u16>,
}

impl Default for RetryOn {
    /// Istio's default policy: `connect-failure,refused-stream,unavailable,cancelled,
    /// retriable-status-codes` with 503.
    fn default() -> Self {
        RetryOn {
            conditions: Conditions(
                Conditions::CONNECT_FAILURE
                    | Conditions::REFUSED_STREAM
                    | Conditions::GRPC_UNAVAILABLE
                    | Conditions::GRPC_CANCELLED
                    | Conditions::RETRIABLE_STATUS_CODES,
            ),
            status_codes: vec![503],
        }
    }
}

impl RetryOn {
    /// A `retryOn` value as Istio translates it: numbers are status codes (and imply
    /// `retriable-status-codes`), the rest Envoy condition names. Validation rejects unknown
    /// names before a snapshot is built; here they are an error too, never dropped.
    pub fn parse(list: &str) -> Result<RetryOn, String> {
        let mut bits = 0;
        let mut status_codes = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Ok(code) = part.parse::<u16>() {
                status_codes.push(code);
                bits |= Conditions::RETRIABLE_STATUS_CODES;
            } else if let Some((_, b)) = NAMES.iter().find(|(n, _)| *n == part) {
                bits |= b;
            } else {
                return Err(format!("unknown retry condition {part:?}"));
            }
        }
        Ok(RetryOn {
            conditions: Conditions(bits),
            status_codes,
        })
    }

    /// An attempt that failed before a response: connect failures, resets (the upstream closed
    /// or reset without answering) and per-try timeouts, as Envoy's router decides them.
    /// Overflow and no healthy host are never retried (Envoy does not either).
    pub fn retries_failure(&self, flag: Option<ResponseFlag>) -> bool {
        let c = self.conditions;
        let any_reset = Conditions::FIVE_XX | Conditions::GATEWAY_ERROR | Conditions::RESET;
        match flag {
            Some(ResponseFlag::UpstreamConnectFailure) => {
                c.has(any_reset | Conditions::CONNECT_FAILURE | Conditions::RESET_BEFORE_REQUEST)
            }
            // A response that could not be read is a reset to Envoy's retry state.
            Some(ResponseFlag::UpstreamReset | ResponseFlag::UpstreamProtocolError) => {
                c.has(any_reset)
            }
            Some(ResponseFlag::UpstreamTimeout) => c.has(any_reset),
            _ => false,
        }
    }

    /// A response that arrived: its status, Envoy's rate-limited mark and gRPC status in the
    /// headers (a trailers-only gRPC answer).
    pub fn retries_response<B>(&self, response: &Response<B>) -> bool {
        let c = self.conditions;
        let status = response.status().as_u16();
        if c.has(Conditions::FIVE_XX) && status >= 500 {
            return true;
        }
        if c.has(Conditions::GATEWAY_ERROR) && matches!(status, 502..=504) {
            return true;
        }
        if c.has(Conditions::RETRIABLE_4XX) && status == 409 {
            return true;
        }
        if c.has(Conditions::RETRIABLE_STATUS_CODES) && self.status_codes.contains(&status) {
            return true;
        }
        let headers = response.headers();
        if c.has(Conditions::ENVOY_RATELIMITED) && headers.contains_key("x-envoy-ratelimited") {
            return true;
        }
        let grpc = headers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u32>().ok());
        match grpc {
            Some(1) => c.has(Conditions::GRPC_CANCELLED),
            Some(4) => c.has(Conditions::GRPC_DEADLINE_EXCEEDED),
            Some(8) => c.has(Conditions::GRPC_RESOURCE_EXHAUSTED),
            Some(13) => c.has(Conditions::GRPC_INTERNAL),
            Some(14) => c.has(Conditions::GRPC_UNAVAILABLE),
            _ => false,
        }
    }
}

/// A route's retries (`retries`): how many, per-try timeout, on which outcomes.
#[derive(Debug)]
pub struct RetryPolicy {
    /// Extra attempts after the first.
    pub attempts: u32,
    pub per_try_timeout: Option<Duration>,
    /// Which outcomes are retried (`retries.retryOn`, else Istio's default).
    pub on: RetryOn,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)]) -> Response<()> {
        let mut b = Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid response")
    }

    #[test]
    fn istio_default_retries_503_and_connect_failures_only() {
        let d = RetryOn::default();
        assert!(d.retries_response(&response(503, &[])));
        assert!(!d.retries_response(&response(500, &[])));
        assert!(!d.retries_response(&response(502, &[])));
        assert!(d.retries_failure(Some(ResponseFlag::UpstreamConnectFailure)));
        assert!(!d.retries_failure(Some(ResponseFlag::UpstreamReset)));
        assert!(!d.retries_failure(Some(ResponseFlag::UpstreamTimeout)));
        assert!(d.retries_response(&response(200, &[("grpc-status", "14")])));
    }

    #[test]
    fn five_xx_retries_every_5xx_resets_and_timeouts() {
        let r = RetryOn::parse("5xx").expect("valid");
        assert!(r.retries_response(&response(500, &[])));
        assert!(r.retries_response(&response(503, &[])));
        assert!(!r.retries_response(&response(404, &[])));
        assert!(r.retries_failure(Some(ResponseFlag::UpstreamReset)));
        assert!(r.retries_failure(Some(ResponseFlag::UpstreamTimeout)));
        assert!(r.retries_failure(Some(ResponseFlag::UpstreamConnectFailure)));
        assert!(!r.retries_failure(Some(ResponseFlag::UpstreamOverflow)));
    }

    #[test]
    fn gateway_error_is_502_to_504() {
        let r = RetryOn::parse("gateway-error").expect("valid");
        assert!(!r.retries_response(&response(500, &[])));
        for s in [502, 503, 504] {
            assert!(r.retries_response(&response(s, &[])));
        }
    }

    #[test]
    fn status_codes_replace_the_default_503() {
        let r = RetryOn::parse("connect-failure, 500 ,retriable-4xx").expect("valid");
        assert!(r.retries_response(&response(500, &[])));
        assert!(!r.retries_response(&response(503, &[])));
        assert!(r.retries_response(&response(409, &[])));
        assert!(!r.retries_failure(Some(ResponseFlag::UpstreamReset)));
        let none = RetryOn::parse("connect-failure").expect("valid");
        assert!(!none.retries_response(&response(503, &[])));
    }

    #[test]
    fn unknown_names_are_errors() {
        assert!(RetryOn::parse("5xx,sometimes").is_err());
        let rl = RetryOn::parse("envoy-ratelimited").expect("valid");
        assert!(rl.retries_response(&response(429, &[("x-envoy-ratelimited", "true")])));
        assert!(!rl.retries_response(&response(429, &[])));
    }
}
