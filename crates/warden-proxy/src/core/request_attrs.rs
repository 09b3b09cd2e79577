//! What the filters see of a request: addresses, method, authority, path, headers (from the
//! map, or from the fast path's lines kept as read), the listener's side and port, TLS.

use crate::core::destination::Side;
use crate::core::tls_info::TlsInfo;
use http::{header, HeaderMap, HeaderValue, Method};
use std::net::{IpAddr, SocketAddr};
use warden_http1::request_head::visible_str;
use warden_http1::request_lines::RequestLines;

/// What the policy stages see of a request.
pub struct RequestAttrs<'a> {
    /// The TCP peer (Envoy's direct remote address; `ipBlocks`).
    pub peer_ip: IpAddr,
    /// The TCP peer's port (ext_authz's source address).
    pub peer_port: u16,
    /// HTTP/1.0, 1.1 or 2 (ext_authz's `protocol`).
    pub version: http::Version,
    /// The trusted client address (`remoteIpBlocks`, rate-limit `remote_address`).
    pub client_ip: IpAddr,
    pub method: &'a Method,
    pub authority: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The request's header map: empty while a fast-path request's lines are kept as read,
    /// which only happens when no stage reads headers ([`Snapshot::reads_request_headers`]).
    pub headers: &'a HeaderMap,
    /// A fast-path request's lines as read, when they are not in `headers`.
    pub lines: Option<&'a RequestLines>,
    /// The listener's configured port.
    pub port: u16,
    /// The local address the connection was accepted on (`destination.ip` / `.port`).
    pub local_addr: SocketAddr,
    /// Which side of the proxy took the request (gateway port, sidecar inbound).
    pub side: Side,
    /// The virtual host (index in the port's route table) routing picked; set by stage 2,
    /// read by the rate limit stages for EnvoyFilter patches that name one.
    pub vhost: u32,
    /// TLS terminated here: the SNI and the client certificate's identity.
    pub tls: Option<&'a TlsInfo>,
}

/// Every value of a request header, from the map or the lines kept as read (what jwt_authn
/// reads: it does not need the map, so a request it alone reads headers of keeps its lines).
impl<'a> warden_jwt::extract::RequestHeaders<'a> for &RequestAttrs<'a> {
    fn values(&self, name: &header::HeaderName) -> impl Iterator<Item = &'a [u8]> {
        match self.lines {
            Some(lines) => Values::Lines(lines.iter(), name.as_str().as_bytes()),
            None => Values::Map(self.headers.get_all(name).iter()),
        }
    }
}

/// The values of one header, from either place (one `match` per step: a chain of two
/// flattened options cost a cached-token request ~200 instructions, callgrind).
enum Values<'a, 'n> {
    Lines(warden_http1::request_lines::Lines<'a>, &'n [u8]),
    Map(http::header::ValueIter<'a, HeaderValue>),
}

impl<'a> Iterator for Values<'a, '_> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Values::Lines(lines, name) => lines.find(|(n, _)| n == name).map(|(_, v)| v),
            Values::Map(values) => values.next().map(HeaderValue::as_bytes),
        }
    }
}

impl RequestAttrs<'_> {
    /// The first value of a header, from the map or the lines kept as read.
    // Always inlined, as everything on the per-request path that reads one header: as calls,
    // `first_value` and `authority_of` cost a local 429 about 1% more instructions (callgrind).
    #[inline(always)]
    pub fn header(&self, name: &header::HeaderName) -> Option<&[u8]> {
        first_value(self.headers, self.lines, name)
    }
}

/// A request's protocol as Envoy writes it (`%PROTOCOL%`, ext_authz's `protocol`).
pub fn protocol_text(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// The first value of a request header: from the lines kept as read when there are some (the
/// map is empty then), else from the map.
#[inline]
fn first_value<'a>(
    headers: &'a HeaderMap,
    lines: Option<&'a RequestLines>,
    name: &header::HeaderName,
) -> Option<&'a [u8]> {
    match lines {
        Some(lines) => lines.get(name.as_str().as_bytes()),
        None => headers.get(name).map(HeaderValue::as_bytes),
    }
}

/// The request's authority: the URI's (HTTP/2, absolute form) or the `Host` header (from
/// the lines kept as read when the map does not hold them).
#[inline(always)]
pub fn authority_of<'a>(
    parts: &'a http::request::Parts,
    lines: Option<&'a RequestLines>,
) -> &'a str {
    if let Some(a) = parts.uri.authority() {
        return a.as_str();
    }
    first_value(&parts.headers, lines, &header::HOST)
        .and_then(visible_str)
        .unwrap_or("")
}
