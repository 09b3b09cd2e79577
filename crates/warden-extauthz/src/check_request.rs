//! The `CheckRequest` Envoy's ext_authz filter sends for a request: source and destination
//! (address, principal), the request's time, id, method, path (query included), host, scheme,
//! protocol and headers (pseudo-headers included, repeated values joined with `,`), the body
//! when the provider asks for it (with `x-envoy-auth-partial-body`), and the TLS session's SNI;
//! and the one of a TCP connection (its peers alone, [`build_tcp`]).

use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Peer, Request, TlsSession,
};
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use envoy_types::pb::google::protobuf::Timestamp;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::SystemTime;

/// The header Envoy adds to the check when a body is sent: whether it was cut.
pub const PARTIAL_BODY_HEADER: &str = "x-envoy-auth-partial-body";

/// What the proxy knows of a request, for its check.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// The downstream peer.
    pub source: SocketAddr,
    /// The peer's mTLS identity as a URI (`spiffe://...`).
    pub source_principal: Option<&'a str>,
    /// Where the connection arrived.
    pub destination: SocketAddr,
    /// This proxy's own mTLS identity as a URI.
    pub destination_principal: Option<&'a str>,
    pub method: &'a str,
    /// The path with its query, as sent.
    pub path: &'a str,
    pub host: &'a str,
    pub scheme: &'a str,
    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`.
    pub protocol: &'a str,
    pub headers: &'a http::HeaderMap,
    pub sni: Option<&'a str>,
    pub time: SystemTime,
}

/// The request body as the check carries it.
#[derive(Debug, Clone, Copy)]
pub struct Body<'a> {
    pub bytes: &'a [u8],
    /// Cut at `maxRequestBytes` (`allowPartialMessage`).
    pub partial: bool,
    /// `packAsBytes`: in `raw_body` rather than `body`.
    pub pack_as_bytes: bool,
}

fn peer(addr: SocketAddr, principal: Option<&str>) -> Peer {
    Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: addr.ip().to_string(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                    addr.port(),
                ))),
                ..SocketAddress::default()
            })),
        }),
        principal: principal.unwrap_or_default().to_owned(),
        ..Peer::default()
    }
}

/// The check's header map: Envoy's view of the request headers, pseudo-headers first, `host`
/// as `:authority`, repeated headers joined with `,`.
pub fn headers(a: &Attributes<'_>, body: Option<&Body<'_>>) -> HashMap<String, String> {
    let mut map = HashMap::with_capacity(a.headers.keys_len() + 5);
    map.insert(":authority".to_owned(), a.host.to_owned());
    map.insert(":method".to_owned(), a.method.to_owned());
    map.insert(":path".to_owned(), a.path.to_owned());
    map.insert(":scheme".to_owned(), a.scheme.to_owned());
    for name in a.headers.keys() {
        if name == http::header::HOST {
            continue;
        }
        let mut joined = String::new();
        for (i, v) in a.headers.get_all(name).iter().enumerate() {
            if i > 0 {
                joined.push(',');
            }
            joined.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
        map.insert(name.as_str().to_owned(), joined);
    }
    if let Some(b) = body {
        map.insert(PARTIAL_BODY_HEADER.to_owned(), b.partial.to_string());
    }
    map
}

/// The CheckRequest for a request (and its body, when the provider asks for it).
pub fn build(a: &Attributes<'_>, body: Option<Body<'_>>) -> CheckRequest {
    let since = a
        .time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let size = match &body {
        Some(b) if !b.partial => b.bytes.len() as i64,
        _ => a
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(-1),
    };
    let (text, raw) = match &body {
        Some(b) if b.pack_as_bytes => (String::new(), b.bytes.to_vec()),
        Some(b) => (String::from_utf8_lossy(b.bytes).into_owned(), Vec::new()),
        None => (String::new(), Vec::new()),
    };
    let http = HttpRequest {
        id: a
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        method: a.method.to_owned(),
        headers: headers(a, body.as_ref()),
        path: a.path.to_owned(),
        host: a.host.to_owned(),
        scheme: a.scheme.to_owned(),
        size,
        protocol: a.protocol.to_owned(),
        body: text,
        raw_body: raw,
        ..HttpRequest::default()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(peer(a.source, a.source_principal)),
            destination: Some(peer(a.destination, a.destination_principal)),
            request: Some(Request {
                time: Some(Timestamp {
                    seconds: since.as_secs() as i64,
                    nanos: since.subsec_nanos() as i32,
                }),
                http: Some(http),
            }),
            tls_session: a.sni.map(|sni| TlsSession {
                sni: sni.to_owned(),
            }),
            ..AttributeContext::default()
        }),
    }
}

/// What the proxy knows of a TCP connection, for Envoy's network ext_authz
/// (`envoy.filters.network.ext_authz`).
#[derive(Debug, Clone, Copy)]
pub struct Connection<'a> {
    pub source: SocketAddr,
    /// The peer's mTLS identity as a URI (`spiffe://...`).
    pub source_principal: Option<&'a str>,
    pub destination: SocketAddr,
    /// This proxy's own mTLS identity as a URI, on a connection whose mTLS ended here.
    pub destination_principal: Option<&'a str>,
}

/// The CheckRequest of a TCP connection, as Envoy's network filter makes it: the source and
/// destination peers only, no request (Istio sets neither the peer certificate nor the TLS
/// session for it).
pub fn build_tcp(c: &Connection<'_>) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(peer(c.source, c.source_principal)),
            destination: Some(peer(c.destination, c.destination_principal)),
            ..AttributeContext::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn a_connection_is_its_peers_alone() {
        let req = build_tcp(&Connection {
            source: "10.0.0.7:41000".parse().unwrap(),
            source_principal: Some("spiffe://cluster.local/ns/foo/sa/sleep"),
            destination: "[fd00::9]:9000".parse().unwrap(),
            destination_principal: None,
        });
        let ctx = req.attributes.unwrap();
        assert!(ctx.request.is_none() && ctx.tls_session.is_none());
        let src = ctx.source.unwrap();
        assert_eq!(src.principal, "spiffe://cluster.local/ns/foo/sa/sleep");
        let dst = ctx.destination.unwrap();
        assert_eq!(dst.principal, "");
        match dst.address.unwrap().address.unwrap() {
            address::Address::SocketAddress(s) => {
                assert_eq!(s.address, "fd00::9");
                assert_eq!(
                    s.port_specifier,
                    Some(socket_address::PortSpecifier::PortValue(9000))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    fn attrs(headers: &http::HeaderMap) -> Attributes<'_> {
        Attributes {
            source: "10.0.0.7:41000".parse().unwrap(),
            source_principal: Some("spiffe://cluster.local/ns/foo/sa/sleep"),
            destination: "10.0.0.9:8080".parse().unwrap(),
            destination_principal: None,
            method: "POST",
            path: "/headers?a=1",
            host: "httpbin.foo:8000",
            scheme: "http",
            protocol: "HTTP/1.1",
            headers,
            sni: Some("httpbin.example.com"),
            time: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1500),
        }
    }

    #[test]
    fn the_request_becomes_envoys_attributes() {
        let mut h = http::HeaderMap::new();
        h.insert("host", HeaderValue::from_static("httpbin.foo:8000"));
        h.append("x-ext-authz", HeaderValue::from_static("allow"));
        h.append("accept", HeaderValue::from_static("a"));
        h.append("accept", HeaderValue::from_static("b"));
        h.insert("x-request-id", HeaderValue::from_static("r1"));
        h.insert("content-length", HeaderValue::from_static("11"));
        let a = attrs(&h);
        let req = build(&a, None);
        let ctx = req.attributes.unwrap();
        let http = ctx.request.as_ref().unwrap().http.as_ref().unwrap();
        assert_eq!(http.headers["x-ext-authz"], "allow");
        assert_eq!(http.headers["accept"], "a,b");
        assert_eq!(http.headers[":authority"], "httpbin.foo:8000");
        assert_eq!(http.headers[":path"], "/headers?a=1");
        assert!(!http.headers.contains_key("host"));
        assert!(!http.headers.contains_key(PARTIAL_BODY_HEADER));
        assert_eq!(
            (http.id.as_str(), http.method.as_str(), http.size),
            ("r1", "POST", 11)
        );
        let src = ctx.source.unwrap();
        assert_eq!(src.principal, "spiffe://cluster.local/ns/foo/sa/sleep");
        match src.address.unwrap().address.unwrap() {
            address::Address::SocketAddress(s) => {
                assert_eq!(s.address, "10.0.0.7");
                assert_eq!(
                    s.port_specifier,
                    Some(socket_address::PortSpecifier::PortValue(41000))
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(ctx.tls_session.unwrap().sni, "httpbin.example.com");
        let t = ctx.request.unwrap().time.unwrap();
        assert_eq!((t.seconds, t.nanos), (1, 500_000_000));
    }

    #[test]
    fn the_body_goes_as_text_or_bytes_with_its_partial_flag() {
        let h = http::HeaderMap::new();
        let a = attrs(&h);
        let cases = [
            (false, false, "hello", Vec::new(), "false", 5),
            (true, false, "hel", Vec::new(), "true", -1),
            (false, true, "", b"hello".to_vec(), "false", 5),
        ];
        for (partial, pack_as_bytes, text, raw, flag, size) in cases {
            let bytes: &[u8] = if partial { b"hel" } else { b"hello" };
            let req = build(
                &a,
                Some(Body {
                    bytes,
                    partial,
                    pack_as_bytes,
                }),
            );
            let http = req.attributes.unwrap().request.unwrap().http.unwrap();
            assert_eq!(http.body, text);
            assert_eq!(http.raw_body, raw);
            assert_eq!(http.headers[PARTIAL_BODY_HEADER], flag);
            assert_eq!(http.size, size);
        }
    }
}
