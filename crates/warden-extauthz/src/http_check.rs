//! Envoy's HTTP ext_authz (Istio's `envoyExtAuthzHttp`): the check is the request itself, sent
//! to the provider with the original method at `pathPrefix` + the original path, carrying
//! `Host`, `Content-Length` (the body sent, else 0), the client headers
//! `includeRequestHeadersInCheck` names and the `includeAdditionalHeadersInCheck` ones. A 200
//! allows the request: the answer's headers `headersToUpstreamOnAllow` names go to the upstream
//! request (none when the list is empty), those `headersToDownstreamOnAllow` names to the
//! client. Any other status denies it with that status, the answer's body, and the headers
//! `headersToDownstreamOnDeny` names (all of them but `Host` and framing when it is empty;
//! `Location` and `WWW-Authenticate` always).

use crate::answer::{Allowed, Denied, EditAction, HeaderEdit, Outcome};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

/// One of Istio's header patterns: `name`, `prefix*` or `*suffix`, case-insensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderPattern {
    Exact(String),
    Prefix(String),
    Suffix(String),
}

impl HeaderPattern {
    /// Istio's `generateHeaders`: a leading `*` is a suffix match, a trailing one a prefix.
    pub fn parse(text: &str) -> HeaderPattern {
        let lower = text.to_ascii_lowercase();
        if let Some(suffix) = lower.strip_prefix('*') {
            HeaderPattern::Suffix(suffix.to_owned())
        } else if let Some(prefix) = lower.strip_suffix('*') {
            HeaderPattern::Prefix(prefix.to_owned())
        } else {
            HeaderPattern::Exact(lower)
        }
    }

    /// Header names are lowercase in an `http::HeaderMap`.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            HeaderPattern::Exact(e) => name == e,
            HeaderPattern::Prefix(p) => name.starts_with(p.as_str()),
            HeaderPattern::Suffix(s) => name.ends_with(s.as_str()),
        }
    }
}

fn any(patterns: &[HeaderPattern], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

/// A provider's HTTP settings, compiled.
#[derive(Debug, Clone, Default)]
pub struct HttpSettings {
    pub path_prefix: String,
    pub request_headers: Vec<HeaderPattern>,
    pub additional_headers: Vec<(HeaderName, HeaderValue)>,
    pub upstream_on_allow: Vec<HeaderPattern>,
    pub downstream_on_allow: Vec<HeaderPattern>,
    pub downstream_on_deny: Vec<HeaderPattern>,
}

/// The check request's head: method, path (with query), headers.
#[derive(Debug, Clone)]
pub struct CheckHead {
    pub method: http::Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// The check for a request: `path` is the original path with its query, `body` what is sent
/// (with whether it was cut).
pub fn check_head(
    s: &HttpSettings,
    method: &http::Method,
    host: &str,
    path: &str,
    request: &HeaderMap,
    body: Option<(&[u8], bool)>,
) -> CheckHead {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(host) {
        headers.insert(http::header::HOST, v);
    }
    for (name, value) in request {
        let framing = name == http::header::HOST
            || name == http::header::CONTENT_LENGTH
            || name == http::header::TRANSFER_ENCODING;
        if !framing && any(&s.request_headers, name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    for (name, value) in &s.additional_headers {
        headers.insert(name.clone(), value.clone());
    }
    let length = body.map_or(0, |(b, _)| b.len());
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Some((_, partial)) = body {
        headers.insert(
            crate::check_request::PARTIAL_BODY_HEADER,
            HeaderValue::from_static(if partial { "true" } else { "false" }),
        );
    }
    CheckHead {
        method: method.clone(),
        path: format!("{}{path}", s.path_prefix),
        headers,
    }
}

/// Headers a denial always forwards, whatever `headersToDownstreamOnDeny` says.
const DENY_ALWAYS: [&str; 2] = ["location", "www-authenticate"];

/// What the provider's answer decides.
pub fn interpret(s: &HttpSettings, status: u16, headers: &HeaderMap, body: Bytes) -> Outcome {
    let picked = |patterns: &[HeaderPattern], always: &[&str]| -> Vec<HeaderEdit> {
        headers
            .iter()
            .filter(|(n, _)| any(patterns, n.as_str()) || always.contains(&n.as_str()))
            .map(|(n, v)| HeaderEdit {
                name: n.clone(),
                value: v.clone(),
                action: EditAction::Set,
            })
            .collect()
    };
    if status == 200 {
        return Outcome::Allowed(Allowed {
            request: picked(&s.upstream_on_allow, &[]),
            response: picked(&s.downstream_on_allow, &[]),
            ..Allowed::default()
        });
    }
    let headers = if s.downstream_on_deny.is_empty() {
        headers
            .iter()
            .filter(|(n, _)| {
                !matches!(
                    n.as_str(),
                    "host" | "content-length" | "transfer-encoding" | "connection" | "keep-alive"
                )
            })
            .map(|(n, v)| HeaderEdit {
                name: n.clone(),
                value: v.clone(),
                action: EditAction::Append,
            })
            .collect()
    } else {
        picked(&s.downstream_on_deny, &DENY_ALWAYS)
    };
    Outcome::Denied(Denied {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> HttpSettings {
        HttpSettings {
            path_prefix: "/check".into(),
            request_headers: vec![
                HeaderPattern::parse("x-ext-authz"),
                HeaderPattern::parse("X-Tenant-*"),
            ],
            additional_headers: vec![(
                HeaderName::from_static("x-added"),
                HeaderValue::from_static("1"),
            )],
            upstream_on_allow: vec![HeaderPattern::parse("*-check-result")],
            downstream_on_allow: vec![HeaderPattern::parse("x-seen")],
            downstream_on_deny: vec![],
        }
    }

    #[test]
    fn patterns_are_istios() {
        let cases = [
            ("x-a", "x-a", true),
            ("X-A", "x-a", true),
            ("x-a", "x-ab", false),
            ("x-*", "x-ab", true),
            ("*-id", "x-request-id", true),
            ("*-id", "x-request", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                HeaderPattern::parse(pattern).matches(name),
                want,
                "{pattern} {name}"
            );
        }
    }

    #[test]
    fn the_check_carries_the_listed_headers_and_the_body_length() {
        let mut req = HeaderMap::new();
        req.insert("x-ext-authz", HeaderValue::from_static("allow"));
        req.insert("x-tenant-id", HeaderValue::from_static("t1"));
        req.insert("cookie", HeaderValue::from_static("secret"));
        req.insert("content-length", HeaderValue::from_static("5"));
        let head = check_head(
            &settings(),
            &http::Method::POST,
            "httpbin:8000",
            "/headers?a=1",
            &req,
            Some((b"hello", false)),
        );
        assert_eq!(head.method, http::Method::POST);
        assert_eq!(head.path, "/check/headers?a=1");
        assert_eq!(head.headers["host"], "httpbin:8000");
        assert_eq!(head.headers["x-ext-authz"], "allow");
        assert_eq!(head.headers["x-tenant-id"], "t1");
        assert_eq!(head.headers["x-added"], "1");
        assert_eq!(head.headers["content-length"], "5");
        assert_eq!(head.headers["x-envoy-auth-partial-body"], "false");
        assert!(head.headers.get("cookie").is_none());
        let head = check_head(&settings(), &http::Method::GET, "h", "/", &req, None);
        assert_eq!(head.headers["content-length"], "0");
    }

    #[test]
    fn allow_passes_the_listed_headers_and_deny_the_providers_answer() {
        let mut answer = HeaderMap::new();
        answer.insert(
            "x-ext-authz-check-result",
            HeaderValue::from_static("allowed"),
        );
        answer.insert("x-seen", HeaderValue::from_static("1"));
        answer.insert("x-other", HeaderValue::from_static("2"));
        answer.insert("content-length", HeaderValue::from_static("3"));
        let Outcome::Allowed(a) = interpret(&settings(), 200, &answer, Bytes::new()) else {
            panic!()
        };
        let names = |e: &[HeaderEdit]| e.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&a.request), ["x-ext-authz-check-result"]);
        assert_eq!(names(&a.response), ["x-seen"]);
        let Outcome::Denied(d) = interpret(&settings(), 403, &answer, Bytes::from("no")) else {
            panic!()
        };
        assert_eq!((d.status, &d.body[..]), (403, &b"no"[..]));
        let mut got = names(&d.headers);
        got.sort();
        assert_eq!(got, ["x-ext-authz-check-result", "x-other", "x-seen"]);
        let mut listed = settings();
        listed.downstream_on_deny = vec![HeaderPattern::parse("x-other")];
        answer.insert("location", HeaderValue::from_static("/login"));
        let Outcome::Denied(d) = interpret(&listed, 302, &answer, Bytes::new()) else {
            panic!()
        };
        let mut got = names(&d.headers);
        got.sort();
        assert_eq!(got, ["location", "x-other"]);
    }
}
