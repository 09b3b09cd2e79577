//! What a script reads and changes of one HTTP stream, as plain data: the phase's headers,
//! body and trailers, what Envoy's `streamInfo()` and `connection()` answer, the dynamic
//! metadata, and what the script asked for (a local reply, an HTTP call, a cleared route cache).

use crate::headers::HeaderList;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Dynamic metadata: namespace -> fields (Envoy's `filter_metadata` Struct per namespace).
pub type DynamicMetadata = BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

/// `connection():ssl()`: what the TLS connection's handshake established.
#[derive(Debug, Clone, Default)]
pub struct SslInfo {
    pub peer_certificate_presented: bool,
    pub peer_certificate_validated: bool,
    /// URI SANs of the peer certificate (SPIFFE ids).
    pub uri_san_peer_certificate: Vec<String>,
    pub dns_sans_peer_certificate: Vec<String>,
    pub subject_peer_certificate: String,
    /// `TLSv1.2`, `TLSv1.3`.
    pub tls_version: String,
}

/// `streamInfo()`: fixed for the stream's life.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`.
    pub protocol: &'static str,
    pub downstream_local_address: SocketAddr,
    /// The TCP peer.
    pub downstream_direct_remote_address: SocketAddr,
    /// The trusted client address (`x-forwarded-for` rules applied).
    pub downstream_remote_address: SocketAddr,
    /// SNI of a TLS connection, else empty.
    pub requested_server_name: String,
    pub route_name: String,
    /// Boxed: a stream moves several times per phase, and a plain connection has none.
    pub ssl: Option<Box<SslInfo>>,
}

impl Default for StreamInfo {
    fn default() -> Self {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        StreamInfo {
            protocol: "HTTP/1.1",
            downstream_local_address: unspecified,
            downstream_direct_remote_address: unspecified,
            downstream_remote_address: unspecified,
            requested_server_name: String::new(),
            route_name: String::new(),
            ssl: None,
        }
    }
}

/// One phase's view of a stream, handed to a script and handed back with its changes.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    /// Request headers (with `:method`, `:path`, `:authority`, `:scheme`) in the request phase,
    /// response headers (with `:status`) in the response phase.
    pub headers: HeaderList,
    /// The buffered body, when the proxy buffered it (`body()` is nil otherwise).
    pub body: Option<Vec<u8>>,
    /// The body is still on its way: `body()` / `bodyChunks()` suspend the phase
    /// ([`crate::Run::Body`]) until the proxy has read it, so a phase that never asks reads
    /// nothing.
    pub body_pending: bool,
    /// The trailers that came after the body (nil in Lua when none, as Envoy has it).
    pub trailers: Option<HeaderList>,
    pub info: StreamInfo,
    pub dynamic_metadata: DynamicMetadata,
    /// `metadata()`: the route's `filter_metadata` under the filter's name.
    pub route_metadata: serde_json::Map<String, serde_json::Value>,
    /// `filterContext()`: the per-route `filter_context`.
    pub filter_context: serde_json::Map<String, serde_json::Value>,
    /// Set when the script changed `headers`.
    pub headers_changed: bool,
    /// Set when the script changed `body`.
    pub body_changed: bool,
    pub dynamic_metadata_changed: bool,
    /// `setHttp1ReasonPhrase`.
    pub reason_phrase: Option<String>,
    /// `clearRouteCache()`: route again with the changed headers.
    pub clear_route_cache: bool,
    /// `httpCall(..., asynchronous = true)`: sent after the phase, answers not awaited.
    pub async_calls: Vec<HttpCall>,
}

/// `respond()`: the local reply a request script answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResponse {
    pub status: u16,
    /// Headers other than `:status`.
    pub headers: HeaderList,
    pub body: Vec<u8>,
}

/// `httpCall()`: a request to a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpCall {
    pub cluster: String,
    /// With `:method`, `:path` and `:authority`, as the script gave them.
    pub headers: HeaderList,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
    pub asynchronous: bool,
    /// The answer's headers as lists when a name repeats (else its last value).
    pub return_duplicate_headers: bool,
}

/// What a call answered (Envoy gives a failed call `:status` 503 and no body).
#[derive(Debug, Clone, Default)]
pub struct HttpReply {
    /// With `:status`.
    pub headers: HeaderList,
    pub body: Option<Vec<u8>>,
}

impl HttpReply {
    /// What the script sees when the call failed (no host, reset, timeout).
    pub fn failed() -> Self {
        let mut headers = HeaderList::new();
        headers.add_bytes(":status", b"503");
        HttpReply {
            headers,
            body: None,
        }
    }
}
