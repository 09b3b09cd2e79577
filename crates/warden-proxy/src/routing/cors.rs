//! A route's `corsPolicy`, as Envoy's CORS filter applies it: preflights from an allowed origin
//! are answered here; other requests from an allowed origin get the allow/expose headers on
//! their response. Requests from other origins pass unchanged (a preflight is forwarded, or
//! answered without CORS headers under `unmatchedPreflights: IGNORE`).

use crate::routing::matcher::StringMatcher;
use crate::upstream::body::ProxyBody;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use warden_config::kinds::virtual_service::{CorsPolicy, StringMatch};

#[derive(Debug)]
pub struct Cors {
    origins: Vec<StringMatcher>,
    allow_methods: Option<HeaderValue>,
    allow_headers: Option<HeaderValue>,
    expose_headers: Option<HeaderValue>,
    max_age: Option<HeaderValue>,
    allow_credentials: bool,
    forward_unmatched_preflights: bool,
}

/// What the CORS stage makes of one request.
pub enum CorsVerdict {
    /// Not a cross-origin request, or its origin is not allowed: on as if there were no policy.
    Pass,
    /// A preflight answered here.
    Answer(Response<ProxyBody>),
    /// An allowed origin's request: its response gets the headers ([`Cors::decorate`]).
    Allowed(HeaderValue),
}

fn joined(items: &[String]) -> Result<Option<HeaderValue>, String> {
    if items.is_empty() {
        return Ok(None);
    }
    HeaderValue::from_str(&items.join(","))
        .map(Some)
        .map_err(|e| format!("{items:?}: {e}"))
}

impl Cors {
    pub fn compile(p: &CorsPolicy) -> Result<Cors, String> {
        let mut origins = Vec::new();
        for m in &p.allow_origins {
            origins.push(StringMatcher::compile(m, false)?);
        }
        // The deprecated `allowOrigin` list is exact origins.
        for o in &p.allow_origin {
            let exact = StringMatch {
                exact: Some(o.clone()),
                ..StringMatch::default()
            };
            origins.push(StringMatcher::compile(&exact, false)?);
        }
        let max_age = match &p.max_age {
            Some(t) => {
                let d = warden_config::parse_duration(t)?;
                Some(HeaderValue::from(d.as_secs()))
            }
            None => None,
        };
        Ok(Cors {
            origins,
            allow_methods: joined(&p.allow_methods)?,
            allow_headers: joined(&p.allow_headers)?,
            expose_headers: joined(&p.expose_headers)?,
            max_age,
            allow_credentials: p.allow_credentials.unwrap_or(false),
            forward_unmatched_preflights: p.unmatched_preflights.as_deref() != Some("IGNORE"),
        })
    }

    /// Envoy's rule: a matcher that admits `*` admits every origin.
    fn allows(&self, origin: &str) -> bool {
        self.origins
            .iter()
            .any(|m| m.matches("*") || m.matches(origin))
    }

    pub fn check(&self, method: &Method, headers: &http::HeaderMap) -> CorsVerdict {
        let Some(origin) = headers.get(header::ORIGIN).filter(|o| !o.is_empty()) else {
            return CorsVerdict::Pass;
        };
        let preflight = method == Method::OPTIONS
            && headers
                .get(header::ACCESS_CONTROL_REQUEST_METHOD)
                .is_some_and(|m| !m.is_empty());
        let allowed = origin.to_str().is_ok_and(|o| self.allows(o));
        match (preflight, allowed) {
            (true, true) => CorsVerdict::Answer(self.preflight(origin)),
            (true, false) if !self.forward_unmatched_preflights => {
                let mut resp = Response::new(ProxyBody::Empty);
                *resp.status_mut() = StatusCode::OK;
                CorsVerdict::Answer(resp)
            }
            (false, true) => CorsVerdict::Allowed(origin.clone()),
            _ => CorsVerdict::Pass,
        }
    }

    fn preflight(&self, origin: &HeaderValue) -> Response<ProxyBody> {
        let mut resp = Response::new(ProxyBody::Empty);
        *resp.status_mut() = StatusCode::OK;
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        if self.allow_credentials {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        for (name, value) in [
            (header::ACCESS_CONTROL_ALLOW_METHODS, &self.allow_methods),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, &self.allow_headers),
            (header::ACCESS_CONTROL_MAX_AGE, &self.max_age),
        ] {
            if let Some(v) = value {
                h.insert(name, v.clone());
            }
        }
        resp
    }

    /// The headers an allowed origin's (non-preflight) response carries.
    pub fn decorate(&self, origin: HeaderValue, response: &mut Response<ProxyBody>) {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        if self.allow_credentials {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Some(v) = &self.expose_headers {
            h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Cors {
        let p = CorsPolicy {
            allow_origins: vec![
                StringMatch {
                    exact: Some("https://example.com".into()),
                    ..StringMatch::default()
                },
                StringMatch {
                    regex: Some(r"https://.*\.trusted\.org".into()),
                    ..StringMatch::default()
                },
            ],
            allow_methods: vec!["POST".into(), "GET".into()],
            allow_headers: vec!["X-Foo-Bar".into()],
            expose_headers: vec!["X-Exposed".into()],
            max_age: Some("24h".into()),
            allow_credentials: Some(true),
            ..CorsPolicy::default()
        };
        Cors::compile(&p).expect("compiles")
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn an_allowed_preflight_is_answered_with_the_policy() {
        let h = headers(&[
            ("origin", "https://example.com"),
            ("access-control-request-method", "POST"),
        ]);
        let CorsVerdict::Answer(resp) = policy().check(&Method::OPTIONS, &h) else {
            panic!("preflight answered");
        };
        let got = resp.headers();
        assert_eq!(got["access-control-allow-origin"], "https://example.com");
        assert_eq!(got["access-control-allow-methods"], "POST,GET");
        assert_eq!(got["access-control-allow-headers"], "X-Foo-Bar");
        assert_eq!(got["access-control-max-age"], "86400");
        assert_eq!(got["access-control-allow-credentials"], "true");
    }

    #[test]
    fn other_origins_pass_and_allowed_ones_are_decorated() {
        let c = policy();
        let evil = headers(&[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "POST"),
        ]);
        assert!(matches!(
            c.check(&Method::OPTIONS, &evil),
            CorsVerdict::Pass
        ));
        let simple = headers(&[("origin", "https://api.trusted.org")]);
        let CorsVerdict::Allowed(origin) = c.check(&Method::GET, &simple) else {
            panic!("allowed");
        };
        let mut resp = Response::new(ProxyBody::Empty);
        c.decorate(origin, &mut resp);
        assert_eq!(
            resp.headers()["access-control-allow-origin"],
            "https://api.trusted.org"
        );
        assert_eq!(resp.headers()["access-control-expose-headers"], "X-Exposed");
        assert!(matches!(
            c.check(&Method::GET, &headers(&[])),
            CorsVerdict::Pass
        ));
    }

    #[test]
    fn a_star_admits_every_origin_and_ignore_answers_unmatched_preflights() {
        let p = CorsPolicy {
            allow_origins: vec![StringMatch {
                exact: Some("*".into()),
                ..StringMatch::default()
            }],
            ..CorsPolicy::default()
        };
        let any = Cors::compile(&p).expect("compiles");
        let h = headers(&[("origin", "https://x.test")]);
        assert!(matches!(
            any.check(&Method::GET, &h),
            CorsVerdict::Allowed(_)
        ));
        let ignore = Cors::compile(&CorsPolicy {
            unmatched_preflights: Some("IGNORE".into()),
            ..CorsPolicy::default()
        })
        .expect("compiles");
        let pre = headers(&[
            ("origin", "https://x.test"),
            ("access-control-request-method", "GET"),
        ]);
        let CorsVerdict::Answer(resp) = ignore.check(&Method::OPTIONS, &pre) else {
            panic!("answered");
        };
        assert!(!resp.headers().contains_key("access-control-allow-origin"));
    }
}
