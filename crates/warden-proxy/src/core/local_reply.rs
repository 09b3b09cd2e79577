//! Responses the proxy makes itself, with Envoy's status codes, bodies and response flags.
//! Every error that reaches the client is turned into a response here.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

/// Envoy's response flags as they appear in access logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFlag {
    /// No route (`NR`).
    NoRoute,
    /// No healthy upstream (`UH`).
    NoHealthyUpstream,
    /// The route's cluster does not exist (`NC`).
    NoClusterFound,
    /// Upstream connection failure (`UF`).
    UpstreamConnectFailure,
    /// Upstream request timeout (`UT`).
    UpstreamTimeout,
    /// Upstream overflow / circuit breaker (`UO`).
    UpstreamOverflow,
    /// Upstream connection termination (`UC`).
    UpstreamReset,
    /// Downstream protocol error (`DPE`).
    DownstreamProtocolError,
    /// Stream idle timeout (`SI`).
    StreamIdleTimeout,
    /// Local rate limited (`RL`).
    RateLimited,
    /// Unauthorized by an external service or RBAC (`UAEX`).
    Unauthorized,
    /// Rate limit service error (`RLSE`).
    RateLimitServiceError,
    /// Fault injected: abort (`FI`).
    FaultInjected,
    /// Fault injected: delay (`DI`).
    DelayInjected,
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
            ResponseFlag::DownstreamProtocolError => "DPE",
            ResponseFlag::StreamIdleTimeout => "SI",
            ResponseFlag::RateLimited => "RL",
            ResponseFlag::Unauthorized => "UAEX",
            ResponseFlag::RateLimitServiceError => "RLSE",
            ResponseFlag::FaultInjected => "FI",
            ResponseFlag::DelayInjected => "DI",
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
