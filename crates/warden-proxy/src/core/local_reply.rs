//! Responses the proxy makes itself, with Envoy's status codes, bodies and response flags.
//! Every error that reaches the client is turned into a response here.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

/// Envoy's response flags as they appear in access logs (`%RESPONSE_FLAGS%`), in the order
/// of Envoy's flag bits, which is the order Envoy writes several of them in (`UF,URX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ResponseFlag {
    /// No healthy upstream (`UH`).
    NoHealthyUpstream,
    /// Upstream request timeout (`UT`).
    UpstreamTimeout,
    /// The stream was reset locally (`LR`).
    LocalReset,
    /// Upstream connection failure (`UF`).
    UpstreamConnectFailure,
    /// Upstream connection termination (`UC`).
    UpstreamReset,
    /// Upstream overflow / circuit breaker (`UO`).
    UpstreamOverflow,
    /// No route (`NR`).
    NoRoute,
    /// Fault injected: delay (`DI`).
    DelayInjected,
    /// Fault injected: abort (`FI`).
    FaultInjected,
    /// Rate limited, locally or by the rate limit service (`RL`).
    RateLimited,
    /// Unauthorized by an external service (`UAEX`).
    Unauthorized,
    /// Rate limit service error (`RLSE`).
    RateLimitServiceError,
    /// The client went away before the answer (`DC`).
    DownstreamConnectionTermination,
    /// Retries ran out on a failure they would have retried (`URX`).
    UpstreamRetryLimitExceeded,
    /// Stream idle timeout (`SI`).
    StreamIdleTimeout,
    /// Downstream protocol error (`DPE`).
    DownstreamProtocolError,
    /// The upstream's response could not be read as HTTP (`UPE`).
    UpstreamProtocolError,
    /// The route's cluster does not exist (`NC`).
    NoClusterFound,
}

impl ResponseFlag {
    pub fn code(self) -> &'static str {
        match self {
            ResponseFlag::NoRoute => "NR",
            ResponseFlag::NoHealthyUpstream => "UH",
            ResponseFlag::NoClusterFound => "NC",
            ResponseFlag::UpstreamConnectFailure => "UF",
            ResponseFlag::UpstreamTimeout => "UT",
            ResponseFlag::UpstreamOverflow => "UO",
            ResponseFlag::UpstreamReset => "UC",
            ResponseFlag::LocalReset => "LR",
            ResponseFlag::DownstreamProtocolError => "DPE",
            ResponseFlag::StreamIdleTimeout => "SI",
            ResponseFlag::RateLimited => "RL",
            ResponseFlag::Unauthorized => "UAEX",
            ResponseFlag::RateLimitServiceError => "RLSE",
            ResponseFlag::FaultInjected => "FI",
            ResponseFlag::DelayInjected => "DI",
            ResponseFlag::DownstreamConnectionTermination => "DC",
            ResponseFlag::UpstreamRetryLimitExceeded => "URX",
            ResponseFlag::UpstreamProtocolError => "UPE",
        }
    }

    /// Envoy's `%RESPONSE_CODE_DETAILS%` for a reply the proxy made for this reason, when a
    /// filter did not say more (RBAC's policy, the local limiter's `local_rate_limited`).
    pub fn details(self) -> &'static str {
        match self {
            ResponseFlag::NoRoute => "route_not_found",
            ResponseFlag::NoHealthyUpstream => "no_healthy_upstream",
            ResponseFlag::NoClusterFound => "cluster_not_found",
            ResponseFlag::UpstreamConnectFailure => {
                "upstream_reset_before_response_started{remote_connection_failure}"
            }
            ResponseFlag::UpstreamReset => {
                "upstream_reset_before_response_started{connection_termination}"
            }
            ResponseFlag::UpstreamOverflow => "upstream_reset_before_response_started{overflow}",
            ResponseFlag::UpstreamProtocolError => {
                "upstream_reset_before_response_started{protocol_error}"
            }
            ResponseFlag::LocalReset => "upstream_reset_before_response_started{local_reset}",
            ResponseFlag::UpstreamTimeout => "upstream_response_timeout",
            ResponseFlag::DownstreamProtocolError => "codec_error",
            ResponseFlag::StreamIdleTimeout => "stream_idle_timeout",
            ResponseFlag::RateLimited => "request_rate_limited",
            ResponseFlag::Unauthorized => "ext_authz_denied",
            ResponseFlag::RateLimitServiceError => "rate_limiter_error",
            ResponseFlag::FaultInjected => "fault_filter_abort",
            ResponseFlag::DelayInjected => "via_upstream",
            ResponseFlag::DownstreamConnectionTermination => "downstream_remote_disconnect",
            ResponseFlag::UpstreamRetryLimitExceeded => "via_upstream",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u8)
    }

    const ALL: [ResponseFlag; 18] = [
        ResponseFlag::NoHealthyUpstream,
        ResponseFlag::UpstreamTimeout,
        ResponseFlag::LocalReset,
        ResponseFlag::UpstreamConnectFailure,
        ResponseFlag::UpstreamReset,
        ResponseFlag::UpstreamOverflow,
        ResponseFlag::NoRoute,
        ResponseFlag::DelayInjected,
        ResponseFlag::FaultInjected,
        ResponseFlag::RateLimited,
        ResponseFlag::Unauthorized,
        ResponseFlag::RateLimitServiceError,
        ResponseFlag::DownstreamConnectionTermination,
        ResponseFlag::UpstreamRetryLimitExceeded,
        ResponseFlag::StreamIdleTimeout,
        ResponseFlag::DownstreamProtocolError,
        ResponseFlag::UpstreamProtocolError,
        ResponseFlag::NoClusterFound,
    ];
}

/// Several response flags (a fault's `DI` before its abort's `FI`, `URX` with the failure
/// retries gave up on), written as Envoy writes them: in flag order, comma-separated, `-` for
/// none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseFlags(u32);

impl ResponseFlags {
    pub fn set(&mut self, flag: ResponseFlag) {
        self.0 |= flag.bit();
    }

    pub fn with(mut self, flag: Option<ResponseFlag>) -> Self {
        if let Some(f) = flag {
            self.set(f);
        }
        self
    }

    pub fn has(self, flag: ResponseFlag) -> bool {
        self.0 & flag.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags in Envoy's order.
    pub fn iter(self) -> impl Iterator<Item = ResponseFlag> {
        ResponseFlag::ALL.into_iter().filter(move |f| self.has(*f))
    }

    /// `%RESPONSE_FLAGS%`: `-`, one code, or codes joined by `,`.
    pub fn write_to(self, out: &mut String) {
        if self.is_empty() {
            out.push('-');
            return;
        }
        for (i, f) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(f.code());
        }
    }
}

/// A response decided by the proxy (no upstream involved).
#[derive(Debug, Clone)]
pub struct LocalReply {
    pub status: StatusCode,
    pub body: Bytes,
    pub flag: Option<ResponseFlag>,
}

impl LocalReply {
    pub fn new(status: StatusCode, body: &'static str, flag: Option<ResponseFlag>) -> Self {
        LocalReply {
            status,
            body: Bytes::from_static(body.as_bytes()),
            flag,
        }
    }

    /// A fault filter abort: Envoy's body.
    pub fn fault_abort(status: StatusCode) -> Self {
        LocalReply {
            status,
            body: Bytes::from_static(b"fault filter abort"),
            flag: Some(ResponseFlag::FaultInjected),
        }
    }

    pub fn no_route() -> Self {
        Self::new(StatusCode::NOT_FOUND, "", Some(ResponseFlag::NoRoute))
    }

    /// A route whose cluster does not exist: Envoy's router answers its
    /// `cluster_not_found_response_code` (503) with no body.
    pub fn no_cluster() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            Some(ResponseFlag::NoClusterFound),
        )
    }

    pub fn no_healthy_upstream() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no healthy upstream",
            Some(ResponseFlag::NoHealthyUpstream),
        )
    }

    pub fn connect_failure() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure",
            Some(ResponseFlag::UpstreamConnectFailure),
        )
    }

    pub fn upstream_reset() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
            Some(ResponseFlag::UpstreamReset),
        )
    }

    /// The upstream's response could not be read (Envoy's 503 with `UPE`).
    pub fn upstream_protocol_error() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream connect error or disconnect/reset before headers. reset reason: protocol error",
            Some(ResponseFlag::UpstreamProtocolError),
        )
    }

    pub fn overflow() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream connect error or disconnect/reset before headers. reset reason: overflow",
            Some(ResponseFlag::UpstreamOverflow),
        )
    }

    pub fn timeout() -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream request timeout",
            Some(ResponseFlag::UpstreamTimeout),
        )
    }

    /// A request body that stopped arriving for the stream idle timeout: Envoy's reply.
    pub fn stream_idle_timeout() -> Self {
        LocalReply::new(
            StatusCode::REQUEST_TIMEOUT,
            "stream timeout",
            Some(ResponseFlag::StreamIdleTimeout),
        )
    }

    pub fn bad_request() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "Bad Request",
            Some(ResponseFlag::DownstreamProtocolError),
        )
    }

    /// Build the HTTP response (`text/plain` when there is a body, as Envoy does); the body
    /// type is the upstream's response body (`upstream::body::ProxyBody`).
    pub fn into_response<B: From<Bytes>>(self) -> Response<B> {
        let mut resp = Response::new(B::from(self.body.clone()));
        *resp.status_mut() = self.status;
        if !self.body.is_empty() {
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_written_in_envoys_order() {
        let cases: &[(&[ResponseFlag], &str)] = &[
            (&[], "-"),
            (&[ResponseFlag::RateLimited], "RL"),
            (
                &[
                    ResponseFlag::UpstreamRetryLimitExceeded,
                    ResponseFlag::UpstreamConnectFailure,
                ],
                "UF,URX",
            ),
            (
                &[ResponseFlag::FaultInjected, ResponseFlag::DelayInjected],
                "DI,FI",
            ),
            (
                &[
                    ResponseFlag::NoClusterFound,
                    ResponseFlag::NoHealthyUpstream,
                ],
                "UH,NC",
            ),
        ];
        for (flags, want) in cases {
            let mut set = ResponseFlags::default();
            for f in *flags {
                set.set(*f);
            }
            let mut out = String::new();
            set.write_to(&mut out);
            assert_eq!(&out, want);
        }
    }

    #[test]
    fn every_flag_is_in_the_order_table_once() {
        for (i, f) in ResponseFlag::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i, "{f:?}");
        }
    }

    #[test]
    fn replies_name_envoys_details() {
        let cases = [
            (LocalReply::no_route(), "route_not_found"),
            (LocalReply::no_cluster(), "cluster_not_found"),
            (LocalReply::no_healthy_upstream(), "no_healthy_upstream"),
            (
                LocalReply::connect_failure(),
                "upstream_reset_before_response_started{remote_connection_failure}",
            ),
            (
                LocalReply::upstream_reset(),
                "upstream_reset_before_response_started{connection_termination}",
            ),
            (
                LocalReply::overflow(),
                "upstream_reset_before_response_started{overflow}",
            ),
            (LocalReply::timeout(), "upstream_response_timeout"),
            (
                LocalReply::fault_abort(StatusCode::SERVICE_UNAVAILABLE),
                "fault_filter_abort",
            ),
            (LocalReply::stream_idle_timeout(), "stream_idle_timeout"),
        ];
        for (reply, want) in cases {
            assert_eq!(reply.flag.map(ResponseFlag::details), Some(want));
        }
    }
}
