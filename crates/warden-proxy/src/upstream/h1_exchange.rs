//! A body-less HTTP/1.1 request to an upstream, and its response, without hyper's client.
//!
//! hyper's client hands every request to a separate connection task over a channel and back,
//! with its own buffers and dispatcher; for a small proxied GET that was most of the
//! proxy's user-space CPU (6.3-7.2 us per request against nginx's 3.0-3.2, same kernel time).
//! Requests without a body (every request the downstream fast path forwards) are written and
//! their responses read here instead, on the proxying task itself: the request head is encoded
//! as hyper encodes it, the response head parsed with hyper's parser (warden-http1's
//! `response_read`), and the body streamed by [`H1Body`], which puts the connection back into
//! its pool once the body has been read to its end. Requests with bodies keep hyper's client.

use crate::core::access_log::sent::SentCount;
use crate::core::forwarding_headers::{
    is_hop_by_hop, strip_hop_by_hop, Forwarding, SeenForwarding, X_FORWARDED_CLIENT_CERT,
    X_FORWARDED_FOR,
};
use crate::upstream::body::{BoxError, ProxyBody};
use crate::upstream::h1_pool::{LeanConns, Pooled};
use bytes::{Buf, Bytes, BytesMut};
use http::uri::Authority;
use http::{request, HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warden_http1::request_lines::RequestLines;
use warden_http1::response_read::{
    self, BodyReader, BodyStep, ParsedResponse, ResponseError, ResponseHead,
};
use warden_http1::socket_read::read_available;

/// Room made in the read buffer before each read.
const READ_ROOM: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// Nothing came back: a reused keep-alive connection the upstream had closed meanwhile.
    #[error("upstream closed the connection before answering: {0}")]
    NoResponse(io::Error),
    #[error("upstream i/o: {0}")]
    Io(io::Error),
    #[error(transparent)]
    Response(#[from] ResponseError),
    #[error("invalid response header")]
    Header,
}

/// One upstream connection used without hyper.
pub struct LeanConn {
    stream: TcpStream,
    buf: BytesMut,
    /// The request head being written, kept for the next request.
    wire: Vec<u8>,
}

impl LeanConn {
    pub fn new(stream: TcpStream) -> Self {
        LeanConn {
            stream,
            buf: BytesMut::new(),
            wire: Vec::new(),
        }
    }

    /// An idle connection that became readable was closed by the upstream (or sent bytes
    /// nobody asked for): either way it cannot carry a request. Polled with a no-op waker, so
    /// checking costs no syscall.
    pub fn is_closed(&self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.stream.poll_read_ready(&mut cx).is_ready() || !self.buf.is_empty()
    }

    /// Write the head of `request` and read the response head. The head is encoded before
    /// the future exists: what an `async fn` takes is room in its future for as long as it
    /// runs, and this future is part of every proxied request's.
    pub fn exchange(
        &mut self,
        request: BodylessRequest<'_>,
        endpoint: &Authority,
    ) -> impl Future<Output = Result<(ResponseHead, Bytes), ExchangeError>> + '_ {
        self.wire.clear();
        encode_request(&mut self.wire, request, endpoint);
        self.send_encoded(request.parts.method == http::Method::HEAD)
    }

    /// Write the request head in `wire` and read the response head.
    async fn send_encoded(
        &mut self,
        head_request: bool,
    ) -> Result<(ResponseHead, Bytes), ExchangeError> {
        self.stream
            .write_all(&self.wire)
            .await
            .map_err(ExchangeError::NoResponse)?;
        let mut received = false;
        loop {
            self.stream.readable().await.map_err(ExchangeError::Io)?;
            match read_available(&self.stream, &mut self.buf, READ_ROOM) {
                Ok(0) if received => {
                    return Err(ExchangeError::Response(ResponseError::Incomplete))
                }
                Ok(0) => {
                    return Err(ExchangeError::NoResponse(
                        io::ErrorKind::UnexpectedEof.into(),
                    ))
                }
                Ok(_) => received = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if received => return Err(ExchangeError::Io(e)),
                Err(e) => return Err(ExchangeError::NoResponse(e)),
            }
            loop {
                match response_read::parse_head(&self.buf, head_request)? {
                    ParsedResponse::Partial => break,
                    ParsedResponse::Interim(len) => self.buf.advance(len),
                    ParsedResponse::Head(head) => {
                        // Lowercased as the map would hold them, so lines written as read
                        // (`RawHead`) match what hyper and Envoy write.
                        for (name, _) in &head.headers {
                            self.buf[name.clone()].make_ascii_lowercase();
                        }
                        // Copied out (a small allocation) rather than split off: a split
                        // shares the buffer, and the next exchange's read would then have to
                        // allocate a new one.
                        let bytes = Bytes::copy_from_slice(&self.buf[..head.len]);
                        self.buf.advance(head.len);
                        return Ok((head, bytes));
                    }
                }
            }
        }
    }
}

/// A body-less request as the lean exchange writes it.
#[derive(Clone, Copy)]
pub struct BodylessRequest<'a> {
    pub parts: &'a request::Parts,
    /// The downstream request's lines as read, when its map does not hold them.
    pub lines: Option<&'a RequestLines>,
    /// The forwarding headers, when they are not in the map yet.
    pub forwarding: Option<&'a Forwarding<'a>>,
}

/// The request head as hyper's client writes a body-less request: the request line with the
/// origin-form target, the headers (the lines kept as read, hop-by-hop ones left out, then the
/// map's), names lowercase, and a `Host` naming the endpoint last when the request has none;
/// the forwarding headers after the request's own.
pub fn encode_request(out: &mut Vec<u8>, request: BodylessRequest<'_>, endpoint: &Authority) {
    let BodylessRequest {
        parts,
        lines,
        forwarding,
    } = request;
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut seen = SeenForwarding::default();
    let mut line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        if forwarding.is_some_and(|f| !f.keeps_line(name, &mut seen)) {
            return;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    for (name, value) in lines.iter().flat_map(|l| l.iter()) {
        // The map's were stripped by the pipeline; lines as read are filtered here.
        if !is_hop_by_hop(name) {
            line(out, name, value);
        }
    }
    for (name, value) in &parts.headers {
        // A body-less request has no transfer coding (hyper drops it too).
        if name != http::header::TRANSFER_ENCODING {
            line(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if let Some(forwarding) = forwarding {
        // The request's own values of a header, lines kept as read first (lazy: read only
        // when the encoder needs them).
        let own = |name: &'static HeaderName| {
            lines
                .iter()
                .flat_map(move |l| l.get_all(name.as_str().as_bytes()))
                .chain(
                    parts
                        .headers
                        .get_all(name)
                        .iter()
                        .map(HeaderValue::as_bytes),
                )
        };
        forwarding.encode(
            out,
            own(&X_FORWARDED_FOR),
            own(&X_FORWARDED_CLIENT_CERT),
            &seen,
        );
    }
    let host_line = lines.is_some_and(|l| l.get(b"host").is_some());
    if !host_line && !parts.headers.contains_key(http::header::HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(endpoint.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The response to hand on: its head as hyper's client would have built it, and a body that
/// gives `conn` back to its pool (`home`) once read to its end.
///
/// The header lines stay as read, in the body ([`RawHead`]), until something asks for them
/// in the map ([`response_headers_mut`]): a response nothing edits is written from them
/// directly (`fast_h1`), and building the map was the largest user-space cost of a small
/// proxied response after parsing it. Headers put into the (empty) map meanwhile replace the
/// lines of the same name, as `HeaderMap::insert` would have. A response without a body to
/// carry the lines, or whose `Connection` names headers to drop, gets its map at once.
pub fn into_response(
    head: ResponseHead,
    bytes: Bytes,
    conn: Pooled<LeanConn>,
    home: Home,
) -> Result<Response<ProxyBody>, ExchangeError> {
    let mut parts = response_parts(&head, &bytes)?;
    if BodyReader::new(head.framing).is_done() {
        // No body: the connection goes home now, and nothing goes on the heap.
        H1Body::new(&head, conn, home).finish();
        let raw = RawHead {
            bytes,
            lines: head.headers,
        };
        raw.read_into(&mut parts.headers)
            .map_err(|()| ExchangeError::Header)?;
        strip_hop_by_hop(&mut parts.headers);
        return Ok(Response::from_parts(parts, ProxyBody::Empty));
    }
    // Built in its box, not moved into it (the body holds the connection: a few hundred bytes
    // that were copied twice per response).
    let mut body = H1Body::boxed(&head, conn, home);
    let raw = RawHead {
        bytes,
        lines: head.headers,
    };
    if head.connection_names {
        raw.read_into(&mut parts.headers)
            .map_err(|()| ExchangeError::Header)?;
        strip_hop_by_hop(&mut parts.headers);
    } else {
        body.raw = Some(raw);
    }
    Ok(Response::from_parts(parts, ProxyBody::H1(body)))
}

/// The response's header map, for reading or editing: an upstream's header lines still kept
/// as read ([`into_response`]) are moved into it first, hop-by-hop ones left out, and what
/// the map held replaces the lines of the same name.
pub fn response_headers_mut(response: &mut Response<ProxyBody>) -> &mut HeaderMap {
    let raw = match response.body_mut() {
        ProxyBody::H1(body) => body.raw.take(),
        _ => None,
    };
    if let Some(raw) = raw {
        let mut upstream = HeaderMap::with_capacity(raw.lines.len() + 4);
        // httparse admits exactly the names and values `http` does, so nothing is skipped.
        let _ = raw.read_into(&mut upstream);
        strip_hop_by_hop(&mut upstream);
        let added = std::mem::replace(response.headers_mut(), upstream);
        response.headers_mut().extend(added);
    }
    response.headers_mut()
}

/// The first value of `name` in the response's header map as [`response_headers_mut`] would
/// make it, without making it: the map's own (which replace the lines of their names), else
/// the first end-to-end line kept as read.
pub fn response_header<'a>(
    response: &'a Response<ProxyBody>,
    name: &HeaderName,
) -> Option<&'a [u8]> {
    let headers = response.headers();
    // A few headers (a direct response's, those put over an upstream's lines) are searched by
    // name: hashing a long custom name cost more than comparing it with each.
    let own = if headers.keys_len() <= 8 {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    } else {
        headers.get(name)
    };
    if let Some(v) = own {
        return Some(v.as_bytes());
    }
    // The map has no header of this name, so none of its lines is replaced: only a
    // hop-by-hop name is not passed on. Lines are compared by name alone (no filter per line).
    let name = name.as_str().as_bytes();
    match response.body() {
        ProxyBody::H1(body) if !is_hop_by_hop(name) => body.unread_header_line(name),
        _ => None,
    }
}

/// Status line of the parsed head as hyper's client would have returned it; the reason
/// phrase is kept when it is not the canonical one.
fn response_parts(
    head: &ResponseHead,
    bytes: &Bytes,
) -> Result<http::response::Parts, ExchangeError> {
    let status = StatusCode::from_u16(head.status).map_err(|_| ExchangeError::Header)?;
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.version = if head.http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let reason = &bytes[head.reason.clone()];
    if !reason.is_empty() && status.canonical_reason().map(str::as_bytes) != Some(reason) {
        if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(bytes.slice(head.reason.clone())) {
            parts.extensions.insert(reason);
        }
    }
    Ok(parts)
}

/// An upstream response's header lines as read: names lowercased, ranges into `bytes`.
struct RawHead {
    bytes: Bytes,
    lines: Vec<(Range<usize>, Range<usize>)>,
}

impl RawHead {
    /// Append the lines to `headers`, values sharing `bytes`; `Err` on a line `http` refuses.
    fn read_into(&self, headers: &mut HeaderMap) -> Result<(), ()> {
        headers.reserve(self.lines.len() + 4);
        for (name, value) in &self.lines {
            let name = HeaderName::from_bytes(&self.bytes[name.clone()]).map_err(|_| ())?;
            let value =
                HeaderValue::from_maybe_shared(self.bytes.slice(value.clone())).map_err(|_| ())?;
            headers.append(name, value);
        }
        Ok(())
    }

    /// The lines a proxy passes on: all but the hop-by-hop ones and those `replaced` has
    /// headers for.
    fn end_to_end<'a>(
        &'a self,
        replaced: &'a HeaderMap,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.lines
            .iter()
            .map(|(name, value)| (&self.bytes[name.clone()], &self.bytes[value.clone()]))
            .filter(move |(name, _)| {
                // The map holds a few headers at most (a limiter's three): compared by bytes,
                // no hashing.
                !is_hop_by_hop(name) && !replaced.keys().any(|k| k.as_str().as_bytes() == *name)
            })
    }
}

/// Where a connection goes back once its response body has been read.
pub struct Home {
    pub pool: Arc<LeanConns>,
    pub endpoint: Authority,
}

/// A response body read from a [`LeanConn`].
pub struct H1Body {
    /// The response's header lines until they are read into its map.
    raw: Option<RawHead>,
    reader: BodyReader,
    /// `None` once the body ended (the connection went back to its pool, or was closed).
    conn: Option<Pooled<LeanConn>>,
    reusable: bool,
    home: Home,
    /// The access log's record of the request, queued when this body ends: counted here, not
    /// by a wrapper that would hide `raw` from the response's writer.
    log: Option<SentCount>,
}

impl H1Body {
    fn new(head: &ResponseHead, conn: Pooled<LeanConn>, home: Home) -> Self {
        H1Body {
            raw: None,
            reader: BodyReader::new(head.framing),
            conn: Some(conn),
            reusable: head.reusable,
            home,
            log: None,
        }
    }

    /// A body with bytes to read, on the heap: the allocation comes first and the body is
    /// written into it.
    fn boxed(head: &ResponseHead, conn: Pooled<LeanConn>, home: Home) -> Box<Self> {
        Box::write(Box::new_uninit(), H1Body::new(head, conn, home))
    }

    /// The response's end-to-end header lines when they were not read into its map
    /// ([`response_headers_mut`]), to be written as they are before the map's `headers`,
    /// which replace the lines of their names.
    pub fn unread_header_lines<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.raw.iter().flat_map(move |raw| raw.end_to_end(headers))
    }

    /// The value of the first of the lines [`H1Body::unread_header_lines`] would give named
    /// `name`, for a name neither hop-by-hop nor in the response's map.
    fn unread_header_line(&self, name: &[u8]) -> Option<&[u8]> {
        let raw = self.raw.as_ref()?;
        raw.lines
            .iter()
            .find(|(n, _)| raw.bytes.get(n.clone()) == Some(name))
            .and_then(|(_, v)| raw.bytes.get(v.clone()))
    }

    /// The body is complete: the connection goes back to its pool if it may carry another
    /// request (and nothing beyond this response arrived on it).
    fn finish(&mut self) {
        if let Some(pooled) = self.conn.take() {
            if self.reusable && pooled.conn.buf.is_empty() {
                self.home.pool.checkin(&self.home.endpoint, pooled);
            }
        }
    }

    fn fail(&mut self, e: impl Into<BoxError>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.conn = None;
        Poll::Ready(Some(Err(e.into())))
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = ready!(this.poll_body(cx));
        if let Some(log) = &mut this.log {
            let reader = &this.reader;
            log.saw(&polled, || reader.is_done());
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.reader.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.reader.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl H1Body {
    /// Queue `log`'s record when this body ends (or is dropped before), with what it sent.
    pub fn log_at_end(&mut self, log: SentCount) {
        self.log = Some(log);
    }

    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self;
        loop {
            let Some(pooled) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let conn = &mut pooled.conn;
            match this.reader.next(&mut conn.buf) {
                Ok(BodyStep::Data(data)) => {
                    if this.reader.is_done() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(BodyStep::Done) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(BodyStep::NeedMore) => {}
                Err(e) => return this.fail(e),
            }
            if let Err(e) = ready!(conn.stream.poll_read_ready(cx)) {
                return this.fail(e);
            }
            match read_available(&conn.stream, &mut conn.buf, READ_ROOM) {
                Ok(0) => {
                    // Closed: the end of a body that runs to the end, an error otherwise.
                    this.conn = None;
                    return match this.reader.on_eof() {
                        Ok(()) => Poll::Ready(None),
                        Err(e) => Poll::Ready(Some(Err(e.into()))),
                    };
                }
                Ok(_) => {}
                // The readiness was stale; `poll_read_ready` registers for the next edge.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return this.fail(e),
            }
        }
    }
}

impl std::fmt::Debug for H1Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Body")
            .field("reader", &self.reader)
            .field("open", &self.conn.is_some())
            .finish()
    }
}
