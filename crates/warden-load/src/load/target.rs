//! Load targets: `http://host:port/path`, `h2c://host:port/path`, `tcp://host:port`.

use super::LoadError;
use std::fmt;
use std::net::SocketAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (h2c).
    Http2,
    Tcp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2 (h2c)",
            Protocol::Tcp => "TCP",
        })
    }
}

/// A parsed, resolved target.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub protocol: Protocol,
    /// `host:port` as written (the Host header / :authority).
    pub authority: String,
    /// Path and query, `/` when absent; empty for TCP.
    pub path_and_query: String,
    pub addr: SocketAddr,
}

/// Split a target URL without resolving it; `force_http2` turns `http://` into h2c.
pub fn parse(url: &str, force_http2: bool) -> Result<(Protocol, String, String), LoadError> {
    let bad = |reason: &str| LoadError::Target {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected http://, h2c:// or tcp://"))?;
    let protocol = match scheme.to_ascii_lowercase().as_str() {
        "http" if force_http2 => Protocol::Http2,
        "http" => Protocol::Http1,
        "h2c" => Protocol::Http2,
        "tcp" => Protocol::Tcp,
        "https" => return Err(bad("TLS is not supported; use http://, h2c:// or tcp://")),
        _ => return Err(bad("unknown scheme; use http://, h2c:// or tcp://")),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad("missing host"));
    }
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = match (has_port, protocol) {
        (true, _) => authority.to_string(),
        (false, Protocol::Tcp) => return Err(bad("tcp:// needs a port")),
        (false, _) => format!("{authority}:80"),
    };
    let path = match (protocol, path) {
        (Protocol::Tcp, _) => String::new(),
        (_, "") => "/".to_string(),
        (_, p) if p.starts_with('?') => format!("/{p}"),
        (_, p) => p.to_string(),
    };
    Ok((protocol, authority, path))
}

impl Target {
    pub async fn resolve(url: &str, force_http2: bool) -> Result<Target, LoadError> {
        let (protocol, authority, path_and_query) = parse(url, force_http2)?;
        let addr = tokio::net::lookup_host(authority.as_str())
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| LoadError::Target {
                url: url.to_string(),
                reason: format!("cannot resolve {authority}"),
            })?;
        Ok(Target {
            url: url.to_string(),
            protocol,
            authority,
            path_and_query,
            addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let p = |u| parse(u, false).unwrap();
        assert_eq!(
            p("http://127.0.0.1:8080/echo?size=1"),
            (
                Protocol::Http1,
                "127.0.0.1:8080".into(),
                "/echo?size=1".into()
            )
        );
        assert_eq!(
            p("http://localhost"),
            (Protocol::Http1, "localhost:80".into(), "/".into())
        );
        assert_eq!(
            p("h2c://[::1]:9/?a=b"),
            (Protocol::Http2, "[::1]:9".into(), "/?a=b".into())
        );
        assert_eq!(
            p("http://h:1?x"),
            (Protocol::Http1, "h:1".into(), "/?x".into())
        );
        assert_eq!(
            p("tcp://127.0.0.1:8078"),
            (Protocol::Tcp, "127.0.0.1:8078".into(), "".into())
        );
        assert_eq!(parse("http://h:1/", true).unwrap().0, Protocol::Http2);
        for bad in [
            "127.0.0.1:80",
            "https://x/",
            "ftp://x/",
            "tcp://x",
            "http:///p",
        ] {
            assert!(parse(bad, false).is_err(), "{bad}");
        }
    }
}
