//! Unary gRPC calls on an HTTP/2 stream of the h2 crate: the request message in one DATA frame
//! that ends the stream, then the response message and its trailers. The proxy makes its
//! ShouldRateLimit calls with it, and the bench client its calls.
//!
//! Why not tonic's generated client over hyper: per call, hyper's HTTP/2 client spawns a task
//! for the response and another to pipe tonic's streaming body, and tonic wraps both ends in
//! streaming codecs and metadata maps. With 1000 calls in flight, that machinery made the
//! proxy's decisions about 10% slower (A/B in one run); here the call is made inside the
//! caller's task. The wire format is the gRPC HTTP/2 protocol: the message behind a 5-byte
//! prefix (`grpc_frame`), the status in the `grpc-status` and
//! `grpc-message` trailers (or in the headers of a trailers-only response).

use crate::grpc_frame::{self, MessageBuf, GRPC_MESSAGE, GRPC_STATUS, NO_MESSAGE};
use bytes::Bytes;
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use prost::Message;
use tonic::{Code, Status};

pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
/// Flow-control windows as hyper's client sets them. h2 charges small unread DATA frames
/// against a budget of half the connection window; with its 64 KiB default, only ~140 calls
/// could hold an unread answer at once before h2 closes the connection (ENHANCE_YOUR_CALM).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// The HTTP/2 handshake of a gRPC client connection (TCP_NODELAY set). The caller spawns the
/// connection future; calls go through the sender.
pub async fn handshake(
    stream: tokio::net::TcpStream,
) -> Result<
    (
        SendRequest<Bytes>,
        h2::client::Connection<tokio::net::TcpStream, Bytes>,
    ),
    h2::Error,
> {
    let _ = stream.set_nodelay(true);
    handshake_over(stream).await
}

/// [`handshake`] over any stream (TLS to an ext_authz provider, say); TCP_NODELAY is the
/// caller's to set.
pub async fn handshake_over<T>(
    io: T,
) -> Result<(SendRequest<Bytes>, h2::client::Connection<T, Bytes>), h2::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake(io)
        .await
}

/// The URI of `method` (e.g. [`SHOULD_RATE_LIMIT`]) at `authority` (`host:port`).
pub fn method_uri(authority: &http::uri::Authority, method: &'static str) -> Uri {
    Uri::builder()
        .scheme("http")
        .authority(authority.clone())
        .path_and_query(method)
        .build()
        .unwrap_or_else(|_| unreachable!("an authority and a method path form a URI"))
}

/// One unary call on `send`'s connection; `uri` is [`method_uri`] of the method.
pub async fn unary<Req: Message, Resp: Message + Default>(
    send: SendRequest<Bytes>,
    uri: &Uri,
    request: &Req,
) -> Result<Resp, Status> {
    unary_with_metadata(send, uri, &[], request).await
}

/// [`unary`] with custom request metadata (e.g. [`crate::lease::LEASE_HEADER`]).
pub async fn unary_with_metadata<Req: Message, Resp: Message + Default>(
    send: SendRequest<Bytes>,
    uri: &Uri,
    metadata: &[(HeaderName, HeaderValue)],
    request: &Req,
) -> Result<Resp, Status> {
    let mut send = send.ready().await.map_err(h2_status)?;
    let mut head = http::Request::new(());
    *head.method_mut() = Method::POST;
    *head.uri_mut() = uri.clone();
    let headers = head.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(TE, HeaderValue::from_static("trailers"));
    for (name, value) in metadata {
        headers.insert(name.clone(), value.clone());
    }
    let (response, mut stream) = send.send_request(head, false).map_err(h2_status)?;
    stream
        .send_data(grpc_frame::encode(request), true)
        .map_err(h2_status)?;

    let (parts, mut body) = response.await.map_err(h2_status)?.into_parts();
    if parts.status != StatusCode::OK {
        return Err(http_status(parts.status));
    }
    // A trailers-only response (an error before any message) has its status in the headers.
    match grpc_status(&parts.headers) {
        None => {}
        Some(Code::Ok) => return Err(Status::internal(NO_MESSAGE)),
        Some(code) => return Err(error_status(code, &parts.headers)),
    }
    let mut message = MessageBuf::default();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(h2_status)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        message.push(chunk)?;
    }
    let trailers = body.trailers().await.map_err(h2_status)?;
    match trailers.as_ref().and_then(|t| Some((grpc_status(t)?, t))) {
        Some((Code::Ok, _)) => message.decode(),
        Some((code, trailers)) => Err(error_status(code, trailers)),
        None => Err(Status::internal("gRPC service response has no grpc-status")),
    }
}

/// The `grpc-status` code, read without `Status::from_header_map`, which copies the whole
/// header map into the status's metadata (~1% of the proxy's CPU with global limits, on every
/// OK answer) and panics on a `grpc-status-details-bin` that is not base64.
fn grpc_status(headers: &http::HeaderMap) -> Option<Code> {
    headers
        .get(GRPC_STATUS)
        .map(|v| Code::from_bytes(v.as_bytes()))
}

/// The status of an answer whose `grpc-status` is `code` (not OK): the code and the
/// percent-decoded `grpc-message` (details and other metadata are not used here).
fn error_status(code: Code, headers: &http::HeaderMap) -> Status {
    let message = headers.get(GRPC_MESSAGE).map_or_else(String::new, |v| {
        percent_encoding::percent_decode(v.as_bytes())
            .decode_utf8_lossy()
            .into_owned()
    });
    Status::new(code, message)
}

fn h2_status(e: h2::Error) -> Status {
    Status::from_error(Box::new(e))
}

/// A non-200 answer (from a proxy in between, usually) mapped as gRPC clients do
/// (grpc/doc/http-grpc-status-mapping.md).
fn http_status(status: StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("gRPC service answered HTTP {status}"))
}
