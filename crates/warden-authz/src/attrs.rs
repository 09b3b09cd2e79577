//! What a check looks at: the attributes of an HTTP request or a TCP connection.

use std::net::IpAddr;

/// One HTTP request, as the proxy sees it after its X-Forwarded-For trust rules.
#[derive(Debug, Clone, Copy)]
pub struct HttpAttrs<'a> {
    /// The TCP peer (what `ipBlocks` / `source.ip` match).
    pub direct_peer: IpAddr,
    /// The trusted client address (what `remoteIpBlocks` / `remote.ip` match).
    pub client_ip: IpAddr,
    /// The local address the connection was accepted on (`destination.ip`).
    pub dest_ip: IpAddr,
    /// The local listener port (`ports`, `destination.port`).
    pub dest_port: u16,
    /// `:authority` / `Host`, port included when the client sent one.
    pub host: &'a str,
    pub method: &'a str,
    /// The path without query or fragment.
    pub path: &'a str,
    pub headers: &'a http::HeaderMap,
    /// TLS server name, when the connection had one.
    pub sni: Option<&'a str>,
    /// The mTLS peer's identity, Istio's principal (`cluster.local/ns/default/sa/client`, the
    /// SPIFFE URI without `spiffe://`); `None` without a verified client certificate.
    pub principal: Option<&'a str>,
    /// The end user's verified JWT (RequestAuthentication); `None` without one.
    pub request_auth: Option<RequestAuth<'a>>,
}

/// What `requestPrincipals` and the `request.auth.*` conditions read of a verified JWT.
#[derive(Debug, Clone, Copy)]
pub struct RequestAuth<'a> {
    /// `iss/sub`.
    pub principal: &'a str,
    /// The token's payload.
    pub claims: &'a serde_json::Map<String, serde_json::Value>,
}

/// One TCP connection (checked on its first byte).
#[derive(Debug, Clone, Copy)]
pub struct TcpAttrs<'a> {
    pub direct_peer: IpAddr,
    /// The client address: the peer, or the PROXY-protocol source when that is in use.
    pub client_ip: IpAddr,
    pub dest_ip: IpAddr,
    pub dest_port: u16,
    pub sni: Option<&'a str>,
    /// As [`HttpAttrs::principal`].
    pub principal: Option<&'a str>,
}

/// The HTTP-only part of a request; absent on TCP listeners.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpPart<'a> {
    pub host: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a http::HeaderMap,
    pub auth: Option<RequestAuth<'a>>,
}

/// The unified view the rules are evaluated against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub direct_peer: IpAddr,
    pub client_ip: IpAddr,
    pub dest_ip: IpAddr,
    pub dest_port: u16,
    pub sni: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub http: Option<HttpPart<'a>>,
}

impl<'a> From<&HttpAttrs<'a>> for Request<'a> {
    fn from(a: &HttpAttrs<'a>) -> Self {
        Request {
            direct_peer: a.direct_peer,
            client_ip: a.client_ip,
            dest_ip: a.dest_ip,
            dest_port: a.dest_port,
            sni: a.sni,
            principal: a.principal,
            http: Some(HttpPart {
                host: a.host,
                method: a.method,
                path: a.path,
                headers: a.headers,
                auth: a.request_auth,
            }),
        }
    }
}

impl<'a> From<&TcpAttrs<'a>> for Request<'a> {
    fn from(a: &TcpAttrs<'a>) -> Self {
        Request {
            direct_peer: a.direct_peer,
            client_ip: a.client_ip,
            dest_ip: a.dest_ip,
            dest_port: a.dest_port,
            sni: a.sni,
            principal: a.principal,
            http: None,
        }
    }
}
