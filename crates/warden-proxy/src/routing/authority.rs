//! One rule for a request's authority, shared by both HTTP/1 server paths and HTTP/2 (RFC 9110
//! §7.2, RFC 9112 §3.2, RFC 9113 §8.3.1; what Envoy and nginx do):
//!
//! - HTTP/1: more than one `Host` line, no `Host` in HTTP/1.1, or a `Host` that is not a valid
//!   `host[:port]` is a 400; an absolute-form target's authority wins over `Host` and replaces it.
//! - HTTP/2: `:authority`, else `host`; both present and naming different hosts is a 400, and so is
//!   neither.
//! - The winner is normalised as nginx's `$host` is (letter case, one trailing dot) and written
//!   back into the request, so routing, authz `hosts`, rate-limit descriptors and the upstream all
//!   see the same one value: a proxy that routes by one authority and forwards another is a
//!   host-based ACL bypass.

use crate::core::forwarding_headers;
use http::header::HOST;
use http::request::Parts;
use http::{HeaderValue, Uri, Version};
use std::borrow::Cow;
use warden_http1::request_lines::RequestLines;

/// Why a request's authority was refused (the `reason` of `warden_downstream_rq_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    MissingHost,
    MultipleHosts,
    /// HTTP/2 `host` naming another host than `:authority`.
    AuthorityMismatch,
    InvalidHost,
}

impl Rejection {
    pub fn label(self) -> &'static str {
        match self {
            Rejection::MissingHost => "missing_host",
            Rejection::MultipleHosts => "multiple_hosts",
            Rejection::AuthorityMismatch => "authority_mismatch",
            Rejection::InvalidHost => "invalid_host",
        }
    }

    /// Envoy's response code details where it has one.
    pub fn details(self) -> &'static str {
        match self {
            Rejection::MissingHost => "missing_host_header",
            Rejection::MultipleHosts => "multiple_host_headers",
            Rejection::AuthorityMismatch => "authority_host_mismatch",
            Rejection::InvalidHost => "invalid_authority",
        }
    }
}

/// Check the request's authority and make its `Host` (and its URI's authority, when it has one)
/// the normalised winner. A fast-path request's lines are read into the map only when `Host`
/// must change (rare: an absolute form, upper case, a trailing dot).
pub fn resolve(parts: &mut Parts, lines: &mut Option<RequestLines>) -> Result<(), Rejection> {
    let (hosts, host) = match lines {
        Some(lines) => {
            let mut all = lines.get_all(b"host");
            let first = all.next();
            (first.map_or(0, |_| 1 + all.count()), first)
        }
        None => {
            let mut all = parts.headers.get_all(HOST).iter();
            let first = all.next();
            (
                first.map_or(0, |_| 1 + all.count()),
                first.map(HeaderValue::as_bytes),
            )
        }
    };
    if hosts > 1 {
        return Err(Rejection::MultipleHosts);
    }
    let h2 = parts.version == Version::HTTP_2;
    let target = parts.uri.authority().map(|a| a.as_str());
    let winner: &[u8] = match (target, host) {
        (Some(target), Some(host)) => {
            if h2 && normalise(valid(host)?)? != normalise(target)? {
                return Err(Rejection::AuthorityMismatch);
            }
            target.as_bytes()
        }
        // RFC 9112 §3.2: an HTTP/1.1 request needs a Host even with an absolute-form target.
        (Some(_), None) if parts.version == Version::HTTP_11 => return Err(Rejection::MissingHost),
        (Some(target), None) => target.as_bytes(),
        (None, Some(host)) => host,
        (None, None) if h2 || parts.version == Version::HTTP_11 => {
            return Err(Rejection::MissingHost)
        }
        // HTTP/1.0 may go without: it is routed as the empty authority.
        (None, None) => return Ok(()),
    };
    let normal = normalise(valid(winner)?)?;
    // HTTP/2 without `host` gets one from `:authority` when forwarded to HTTP/1.
    let set_host = host != Some(normal.as_bytes()) && !(h2 && host.is_none());
    let set_uri = target.is_some_and(|t| t != normal);
    if !set_host && !set_uri {
        return Ok(());
    }
    // The rare case: the request's own bytes are not the normal form.
    let normal = normal.into_owned();
    if set_host {
        let value = HeaderValue::from_str(&normal).map_err(|_| Rejection::InvalidHost)?;
        if let Some(lines) = lines.take() {
            lines.read_into(&mut parts.headers, forwarding_headers::ADDED);
        }
        parts.headers.insert(HOST, value);
    }
    if set_uri {
        parts.uri = with_authority(&parts.uri, &normal)?;
    }
    Ok(())
}

/// `uri` with its authority replaced.
fn with_authority(uri: &Uri, authority: &str) -> Result<Uri, Rejection> {
    let mut uri_parts = uri.clone().into_parts();
    uri_parts.authority = Some(authority.parse().map_err(|_| Rejection::InvalidHost)?);
    Uri::from_parts(uri_parts).map_err(|_| Rejection::InvalidHost)
}

/// A `Host` value as text, if it is a `host[:port]` (RFC 3986 reg-name, IPv4 or a bracketed IP
/// literal; no userinfo). An empty one is allowed (RFC 9110 §7.2, a target without authority).
fn valid(value: &[u8]) -> Result<&str, Rejection> {
    let ok = value.iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
            )
    });
    let text = std::str::from_utf8(value).map_err(|_| Rejection::InvalidHost)?;
    if !ok || (!text.is_empty() && text.parse::<http::uri::Authority>().is_err()) {
        return Err(Rejection::InvalidHost);
    }
    Ok(text)
}

/// Lowercase, and the host without its trailing dot (`Example.COM.:80` -> `example.com:80`),
/// borrowed when already normal. `a..b`, or a host that is only dots, is not a host.
pub fn normalise(authority: &str) -> Result<Cow<'_, str>, Rejection> {
    let host = crate::routing::host_of(authority);
    let port = &authority[host.len()..];
    if !host.starts_with('[') && (host.contains("..") || host == ".") {
        return Err(Rejection::InvalidHost);
    }
    let trimmed = match host.strip_suffix('.') {
        Some(h) if !host.starts_with('[') => h,
        _ => host,
    };
    if trimmed.len() == host.len() && !authority.bytes().any(|b| b.is_ascii_uppercase()) {
        return Ok(Cow::Borrowed(authority));
    }
    let mut normal = String::with_capacity(authority.len());
    normal.push_str(trimmed);
    normal.push_str(port);
    normal.make_ascii_lowercase();
    Ok(Cow::Owned(normal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(version: Version, uri: &str, hosts: &[&str]) -> Parts {
        let mut b = Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header(HOST, *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn resolved(
        version: Version,
        uri: &str,
        hosts: &[&str],
    ) -> Result<(String, String), Rejection> {
        let mut p = parts(version, uri, hosts);
        resolve(&mut p, &mut None)?;
        let host = p
            .headers
            .get(HOST)
            .map_or("", |v| v.to_str().unwrap())
            .to_string();
        Ok((
            host,
            p.uri.authority().map_or("", |a| a.as_str()).to_string(),
        ))
    }

    #[test]
    fn http1_rules() {
        const HTTP_10: Version = Version::HTTP_10;
        const HTTP_11: Version = Version::HTTP_11;
        let ok = |uri, hosts: &[&str]| resolved(HTTP_11, uri, hosts).unwrap();
        assert_eq!(ok("/", &["a.example"]), ("a.example".into(), "".into()));
        assert_eq!(
            ok("/", &["A.Example.:8080"]),
            ("a.example:8080".into(), "".into())
        );
        assert_eq!(ok("/", &[""]), ("".into(), "".into()));
        // The absolute form wins and replaces Host.
        assert_eq!(
            ok("http://Target.example./x", &["other.example"]),
            ("target.example".into(), "target.example".into())
        );
        let err = |v, uri, hosts: &[&str]| resolved(v, uri, hosts).unwrap_err();
        assert_eq!(err(HTTP_11, "/", &[]), Rejection::MissingHost);
        assert_eq!(err(HTTP_11, "http://a/", &[]), Rejection::MissingHost);
        assert_eq!(err(HTTP_11, "/", &["a", "a"]), Rejection::MultipleHosts);
        for bad in ["a b", "user@a", "a/b", "a..b", ".", "a:b:c", "[::1"] {
            assert_eq!(err(HTTP_11, "/", &[bad]), Rejection::InvalidHost, "{bad}");
        }
        assert_eq!(resolved(HTTP_10, "/", &[]).unwrap(), ("".into(), "".into()));
    }

    #[test]
    fn http2_rules() {
        const HTTP_2: Version = Version::HTTP_2;
        let ok = |uri, hosts: &[&str]| resolved(HTTP_2, uri, hosts).unwrap();
        assert_eq!(
            ok("http://a.example/", &[]),
            ("".into(), "a.example".into())
        );
        assert_eq!(
            ok("http://A.example./", &["a.EXAMPLE"]),
            ("a.example".into(), "a.example".into())
        );
        assert_eq!(ok("/", &["h.example"]), ("h.example".into(), "".into()));
        let err = |uri, hosts: &[&str]| resolved(HTTP_2, uri, hosts).unwrap_err();
        assert_eq!(
            err("http://a.example/", &["b.example"]),
            Rejection::AuthorityMismatch
        );
        assert_eq!(err("/", &[]), Rejection::MissingHost);
        assert_eq!(err("http://a/", &["a", "a"]), Rejection::MultipleHosts);
    }

    #[test]
    fn lines_kept_as_read_move_to_the_map_only_to_change_host() {
        use warden_http1::request_head::{header_slots, parse, Parsed};
        let lines_of = |head: &str| {
            let mut slots = header_slots();
            let Parsed::Fast(r) = parse(head.as_bytes(), &mut slots) else {
                panic!("{head}")
            };
            RequestLines::new(r.headers)
        };
        let mut p = parts(Version::HTTP_11, "/", &[]);
        let mut lines = lines_of("GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\r\n\r\n");
        resolve(&mut p, &mut lines).unwrap();
        assert!(lines.is_some() && p.headers.is_empty());

        let mut lines = lines_of("GET / HTTP/1.1\r\nHost: A.example.\r\nX: 1\r\n\r\n");
        resolve(&mut p, &mut lines).unwrap();
        assert!(lines.is_none());
        assert_eq!(p.headers[HOST], "a.example");
        assert_eq!(p.headers["x"], "1");

        let mut p = parts(Version::HTTP_11, "/", &[]);
        let mut lines = lines_of("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n");
        assert_eq!(resolve(&mut p, &mut lines), Err(Rejection::MultipleHosts));
    }

    #[test]
    fn normal_forms() {
        for (a, n) in [
            ("example.com", "example.com"),
            ("Example.COM.", "example.com"),
            ("example.com.:443", "example.com:443"),
            ("[::1]:80", "[::1]:80"),
            ("[FE80::1]", "[fe80::1]"),
            ("10.0.0.1.", "10.0.0.1"),
        ] {
            assert_eq!(normalise(a).unwrap(), n, "{a}");
        }
        assert!(matches!(normalise("a.b"), Ok(Cow::Borrowed(_))));
    }
}
