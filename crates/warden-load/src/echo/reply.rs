//! What a request is answered with, decided in one place for both HTTP paths: hyper
//! ([`super::http`]) and the HTTP/1.1 fast path ([`super::fast_h1`]). Each path only encodes the
//! [`Reply`] its own way.

use super::counts::{ConnectionCounts, SourceCounts};
use super::params::{EchoParams, ParamError};
use bytes::Bytes;
use http::header::{
    ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, TRAILER, TRANSFER_ENCODING,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use std::time::Duration;

/// `GET` reports requests served per source IP as JSON, `DELETE` reports and resets them.
/// Requests to this path are never counted themselves.
pub const COUNT_PATH: &str = "/count";

/// Response headers hyper manages itself (framing, connection, date). When `header=` sets one of
/// them, the fast path leaves the request to hyper rather than second-guess how hyper merges them.
const HYPER_MANAGED: [HeaderName; 5] =
    [CONTENT_LENGTH, TRANSFER_ENCODING, CONNECTION, DATE, TRAILER];

/// The request, read from its path and query; nothing counted or rolled yet.
#[derive(Debug)]
pub(super) enum Plan {
    Count,
    Echo(EchoParams),
    BadParameter(ParamError),
}

/// The answer to one request.
pub(super) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: ReplyBody,
    /// Wait this long before answering (never on the fast path, see [`Plan::needs_hyper`]).
    pub delay: Duration,
}

pub(super) enum ReplyBody {
    Empty,
    /// This many bytes of the repeated pattern.
    Pattern(usize),
    Text(Bytes),
    /// No `size=`: the request's own body goes back (nothing when it has none).
    RequestBody,
}

impl Plan {
    pub(super) fn new(path: &str, query: Option<&str>) -> Plan {
        if path == COUNT_PATH {
            return Plan::Count;
        }
        match query.map(EchoParams::parse) {
            None => Plan::Echo(EchoParams::default()),
            Some(Ok(params)) => Plan::Echo(params),
            Some(Err(err)) => Plan::BadParameter(err),
        }
    }

    /// Whether answering may need what only the hyper path has: a timer for `delay`, or hyper's
    /// handling of a framing or connection header the client asked for.
    pub(super) fn needs_hyper(&self) -> bool {
        match self {
            Plan::Echo(params) => {
                params.may_delay()
                    || params
                        .headers
                        .iter()
                        .any(|(name, _)| HYPER_MANAGED.contains(name))
            }
            Plan::Count | Plan::BadParameter(_) => false,
        }
    }

    /// Count the request (unless it asks for the counts) and roll the weighted choices.
    pub(super) fn reply(self, method: &Method, counts: &ConnectionCounts) -> Reply {
        let params = match self {
            Plan::Count => return count_endpoint(method, counts.all()),
            Plan::BadParameter(err) => {
                counts.count_request();
                return plain(
                    StatusCode::BAD_REQUEST,
                    format!("bad echo parameter {err}\n"),
                );
            }
            Plan::Echo(params) => {
                counts.count_request();
                params
            }
        };
        let resolved = params.resolve(|| fastrand::f64() * 100.0);
        let body = match resolved.size {
            Some(0) => ReplyBody::Empty,
            Some(n) => ReplyBody::Pattern(n),
            None => ReplyBody::RequestBody,
        };
        let mut headers = HeaderMap::new();
        for (name, value) in params.headers {
            headers.append(name, value);
        }
        Reply {
            status: resolved.status,
            headers,
            body,
            delay: resolved.delay,
        }
    }
}

fn count_endpoint(method: &Method, counts: &SourceCounts) -> Reply {
    let report = |counts: &SourceCounts| {
        let by_ip: serde_json::Map<String, serde_json::Value> = counts
            .snapshot()
            .into_iter()
            .map(|(ip, n)| (ip.to_string(), n.into()))
            .collect();
        let total: u64 = by_ip.values().filter_map(|v| v.as_u64()).sum();
        serde_json::json!({ "total": total, "by_ip": by_ip }).to_string() + "\n"
    };
    let text = match *method {
        Method::GET | Method::HEAD => report(counts),
        Method::DELETE => {
            let before = report(counts);
            counts.reset();
            before
        }
        _ => {
            let mut reply = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or DELETE\n");
            reply
                .headers
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD, DELETE"));
            return reply;
        }
    };
    text_reply(StatusCode::OK, "application/json", text)
}

fn plain(status: StatusCode, text: impl Into<Bytes>) -> Reply {
    text_reply(status, "text/plain", text)
}

fn text_reply(status: StatusCode, content_type: &'static str, text: impl Into<Bytes>) -> Reply {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Reply {
        status,
        headers,
        body: ReplyBody::Text(text.into()),
        delay: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_from_path_and_query() {
        assert!(matches!(Plan::new("/count", Some("size=1")), Plan::Count));
        assert!(matches!(
            Plan::new("/x", Some("size=x")),
            Plan::BadParameter(_)
        ));
        assert!(!Plan::new("/", None).needs_hyper());
        assert!(!Plan::new("/", Some("delay=0&header=X-A:b")).needs_hyper());
        assert!(Plan::new("/", Some("delay=1ms")).needs_hyper());
        assert!(Plan::new("/", Some("header=Connection:close")).needs_hyper());
        assert!(Plan::new("/", Some("header=content-length:3")).needs_hyper());
    }
}
