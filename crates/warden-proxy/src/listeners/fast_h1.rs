//! The HTTP/1.1 fast path of a downstream connection.
//!
//! hyper's HTTP/1 server dispatch (its own buffers, a request and response per call, its
//! dispatcher state machine) was a large part of the proxy's user-space CPU for small requests,
//! and all of it for a direct response, a 403 or a 429. Every HTTP connection
//! starts here instead: body-less requests are parsed from the read buffer (their header lines
//! kept as read, warden-http1's `RequestLines`, unless the running config reads headers), run
//! through the same [`pipeline::handle`] as hyper's requests (routing, policies, upstream, metrics, access
//! log) and answered into one output buffer, written the way hyper's server writes responses
//! (warden-http1's `response_head`). Pipelined requests answered without waiting go out in
//! one write; upstream bodies are streamed (chunked when their length is unknown).
//!
//! Everything else goes to hyper with the bytes already read ([`ReplayIo`]): from the first
//! request on that has a body, an upgrade, an expectation or anything
//! [`request_head`] does not vouch for; h2c goes to hyper from its first byte. hyper keeps the
//! connection from then on. Responses already answered here are written before it takes over.

use crate::core::conn::ConnCtx;
use crate::core::forwarding_headers;
use crate::core::timeouts::{self, ConnClock, Expired, Timeouts};
use crate::listeners::buffer_pool;
use crate::listeners::framing_guard::FramingGuard;
use crate::listeners::h2_abuse::{self, ResetTracker};
use crate::listeners::h2_goaway_code::{Calm, GoawayCode};
use crate::pipeline::WorkerCtx;
use crate::pipeline::{self, Answer, Handling};
use crate::upstream::body::ProxyBody;
use bytes::{Buf, Bytes, BytesMut};
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version,
};
use http_body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::convert::Infallible;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use warden_http1::http_date;
use warden_http1::replay_io::ReplayIo;
use warden_http1::request_head::{self, FastRequest, Parsed};
use warden_http1::request_lines::RequestLines;
use warden_http1::response_head::{self, BodyEncoding, BodyLength, Framing, Head, Written};
use warden_http1::socket_read::read_available;
use warden_local_ratelimit::RateLimitHeaders;

/// Write the output out mid-batch once it holds this much (many pipelined requests).
const MAX_BUFFERED_OUTPUT: usize = 64 * 1024;

/// What serving a connection needs besides the socket.
pub struct Serving {
    pub conn: Arc<ConnCtx>,
    pub worker: Arc<WorkerCtx>,
    pub hyper: Arc<auto::Builder<TokioExecutor>>,
    /// Registers the connection with the listener's graceful drain once hyper has it.
    pub watcher: Watcher,
    /// Changes when the listener drains: the fast path closes between requests.
    pub stop: watch::Receiver<()>,
    /// Set by [`FramingGuard`] (a head with both Content-Length and Transfer-Encoding).
    pub violation: Arc<AtomicBool>,
    /// hyper's limit for a request head; a longer incomplete head goes to hyper for its 431.
    pub max_head: usize,
    pub timeouts: Timeouts,
}

/// Serve one accepted HTTP connection until it closes.
pub async fn serve(stream: TcpStream, serving: Serving) {
    // One registration with the drain signal per connection, not one per read.
    let mut stop = serving.stop.clone();
    let mut stopped = std::pin::pin!(stop.changed());
    let mut fast = Connection {
        stream,
        bufs: Buffers::default(),
    };
    let mut first_read = true;
    // One timer for the connection's timeouts, re-armed only when it fires (see `timeouts`).
    let timeouts = serving.timeouts;
    let mut clock = ConnClock::new(Instant::now());
    let first = clock.deadline(&timeouts);
    let mut armed = first.map_or_else(far_future, |(at, _)| at);
    let mut timer = Box::pin(tokio::time::sleep_until(armed.into()));
    let mut timing = first.is_some();
    loop {
        // Wait for bytes holding no buffer (see `buffer_pool`).
        tokio::select! {
            // Readable first: the drain signal is only polled (and its waker registered, once,
            // as `stopped` lives across requests) when there is nothing to read.
            biased;
            ready = fast.stream.readable() => if ready.is_err() { return },
            // Draining: close between requests, as hyper does with an idle connection.
            _ = &mut stopped => return,
            _ = &mut timer, if timing => {
                match clock.deadline(&timeouts) {
                    Some((at, expired)) if at <= Instant::now() => {
                        if expired == Expired::RequestHeaders {
                            let _ = fast.stream.try_write(timeouts::REQUEST_TIMEOUT_RESPONSE);
                        }
                        serving.worker.shared.metrics.downstream_timeout(expired);
                        let _ = fast.stream.shutdown().await;
                        return;
                    }
                    Some((at, _)) => {
                        armed = at;
                        timer.as_mut().reset(at.into());
                    }
                    None => timing = false,
                }
                continue;
            }
        }
        let input = &mut fast.bufs.input;
        if input.capacity() == 0 {
            *input = buffer_pool::take_input();
        }
        match read_available(&fast.stream, input, buffer_pool::BUFFER_SIZE) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                fast.bufs.release_idle();
                continue;
            }
            Err(_) => return,
        }
        if std::mem::take(&mut first_read) && warden_http1::starts_like_h2(&fast.bufs.input) {
            let input = std::mem::take(&mut fast.bufs.input);
            return with_hyper(fast.stream, input, serving).await;
        }
        // Boxed, like `with_hyper`: what answering needs lives on the heap only while bytes are
        // being answered, so an idle connection's task stays a few cache lines.
        let read = fast.bufs.input.len();
        // The box first, the future made in it: `Box::pin` would copy the whole future.
        let next = Box::into_pin(Box::write(
            Box::new_uninit(),
            fast.answer_buffered(&serving),
        ))
        .await;
        if fast.flush().await.is_err() {
            return;
        }
        let left = fast.bufs.input.len();
        clock.after_read(Instant::now(), left < read, left > 0);
        // A later deadline waits for the timer to fire; an earlier one (a head started) re-arms
        // it now.
        if let Some((at, _)) = clock.deadline(&timeouts) {
            if at < armed || !timing {
                armed = at;
                timer.as_mut().reset(at.into());
                timing = true;
            }
        }
        match next {
            Ok(Next::Read) if fast.bufs.input.len() < serving.max_head => fast.bufs.release_idle(),
            Ok(Next::Read | Next::Hyper) => {
                let input = std::mem::take(&mut fast.bufs.input);
                return with_hyper(fast.stream, input, serving).await;
            }
            Ok(Next::Close) => {
                let _ = fast.stream.shutdown().await;
                return;
            }
            Err(_) => return,
        }
    }
}

/// A deadline that never comes, for a timer with nothing to time.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

/// hyper serves the rest of the connection, starting with the bytes in `input`.
///
/// Boxed: hyper's connection state is over 2 KiB, and inline it would make every connection's
/// task that large. Measured at 1000 connections, the first touch of each woken task's state was
/// then a cache miss costing more than the request's parsing.
fn with_hyper(
    stream: TcpStream,
    input: BytesMut,
    serving: Serving,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(serve_with_hyper(stream, input, serving))
}

/// A TLS connection, served by hyper from its first byte (HTTP/1.1, or HTTP/2 when ALPN
/// chose it: hyper's auto builder reads the preface), after `input` (decrypted bytes already
/// read, to tell HTTP from TCP). The fast path's reads and writes are plain-socket syscalls, so
/// TLS does not take it.
pub fn serve_tls<S>(
    stream: S,
    input: BytesMut,
    serving: Serving,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(serve_with_hyper(stream, input, serving))
}

async fn serve_with_hyper<S>(stream: S, input: BytesMut, serving: Serving)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Serving {
        conn,
        worker,
        hyper,
        watcher,
        mut stop,
        violation,
        timeouts,
        ..
    } = serving;
    // The listener's drain reaches this connection through `stop` (below), so that an abusive
    // HTTP/2 client can be sent the same GOAWAY.
    drop(watcher);
    let shared = worker.shared.clone();
    let peer = conn.peer;
    // An abusive HTTP/2 client's GOAWAY says ENHANCE_YOUR_CALM (`h2_goaway_code`).
    let calm = Calm::default();
    let h2 = !input.is_empty() && warden_http1::starts_like_h2(&input);
    let io = TokioIo::new(GoawayCode::new(
        FramingGuard::new(ReplayIo::new(input.freeze(), stream), violation),
        h2,
        calm.clone(),
    ));
    let resets = Arc::new(ResetTracker::default());
    let tracker = resets.clone();
    let stream_idle = timeouts.stream_idle;
    let service = hyper::service::service_fn(move |req| {
        let worker = worker.clone();
        let conn = conn.clone();
        let stream = (req.version() == Version::HTTP_2).then(|| tracker.stream());
        async move {
            if stream.is_some() {
                h2_abuse::settle().await;
            }
            let version = req.version();
            let req = req.map(|b| ProxyBody::downstream(b, stream_idle));
            let response = pipeline::handle(req, None, &conn, &worker)
                .answer()
                .await
                .into_response();
            if let Some(stream) = stream {
                stream.answered();
            }
            Ok::<_, Infallible>(for_hyper(response, version))
        }
    });
    let mut connection = std::pin::pin!(hyper.serve_connection(io, service).into_owned());
    let (mut shutting_down, mut drain_open) = (false, true);
    let max_duration = timeouts.max_connection_duration;
    let mut too_old = std::pin::pin!(tokio::time::sleep(
        max_duration.unwrap_or(Duration::from_secs(86400 * 365))
    ));
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            _ = &mut too_old, if max_duration.is_some() && !shutting_down => {
                shutting_down = true;
                shared.metrics.downstream_timeout(Expired::MaxDuration);
                connection.as_mut().graceful_shutdown();
            }
            changed = stop.changed(), if drain_open && !shutting_down => match changed {
                Ok(()) => {
                    shutting_down = true;
                    connection.as_mut().graceful_shutdown();
                }
                // The listener is gone without a drain: nothing will ask again.
                Err(_) => drain_open = false,
            },
            _ = resets.abusive(), if !shutting_down => {
                shutting_down = true;
                shared.metrics.h2_premature_reset_closes.inc();
                tracing::info!(%peer, "HTTP/2 client resets most of its streams: GOAWAY ENHANCE_YOUR_CALM");
                calm.set();
                connection.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "downstream connection error");
    }
}

/// The reason phrase of a response that brings none of its own (a local reply, or an upstream's
/// empty one): the standard phrase, or `Unknown` for codes without one, as Envoy writes every
/// status line (hyper's placeholder would be `<none>`).
fn status_phrase(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Unknown")
}

/// A response as hyper's server writes it like the fast path does: an upstream's header lines
/// kept as read go into the map (hyper writes only the map), and [`status_phrase`] goes in as
/// an extension, only on this path and only for the codes that need it.
fn for_hyper(mut response: Response<ProxyBody>, version: Version) -> Response<ProxyBody> {
    crate::upstream::h1_exchange::response_headers_mut(&mut response);
    let status = response.status();
    if version < Version::HTTP_2
        && status.canonical_reason().is_none()
        && response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .is_none()
    {
        response
            .extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(
                status_phrase(status).as_bytes(),
            ));
    }
    response
}

/// What the connection does once the buffered requests are answered.
enum Next {
    /// Read more: the buffer ends with an incomplete request head, or nothing.
    Read,
    /// Hand the connection to hyper from the first unanswered request on.
    Hyper,
    /// The last answered request closes the connection.
    Close,
}

struct Connection {
    stream: TcpStream,
    bufs: Buffers,
}

/// A connection's buffers, taken from the thread's pool when bytes arrive and given back
/// when the connection is idle or ends.
#[derive(Default)]
struct Buffers {
    /// Read and not yet answered.
    input: BytesMut,
    /// Responses not yet written.
    out: Vec<u8>,
}

impl Buffers {
    /// Between requests: hand back what holds nothing (a partial request head stays).
    fn release_idle(&mut self) {
        if self.input.is_empty() {
            buffer_pool::give_input(std::mem::take(&mut self.input));
        }
        if self.out.is_empty() {
            buffer_pool::give_output(std::mem::take(&mut self.out));
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        self.input.clear();
        self.release_idle();
    }
}

impl Connection {
    /// Answer every complete request in `input`, in order, until one must go to hyper.
    async fn answer_buffered(&mut self, serving: &Serving) -> io::Result<Next> {
        if self.bufs.out.capacity() == 0 {
            self.bufs.out = buffer_pool::take_output();
        }
        loop {
            let (request, lines, framing, len) = match next_head(&self.bufs.input) {
                ControlFlow::Continue(answer) => answer,
                ControlFlow::Break(next) => return Ok(next),
            };
            self.bufs.input.advance(len);
            let answer = match pipeline::handle(request, lines, &serving.conn, &serving.worker) {
                Handling::Answered(answer) => answer,
                Handling::Waiting(mut waiting) => match futures_util::poll!(&mut waiting) {
                    Poll::Ready(answer) => answer,
                    // Waiting for an upstream or the RLS: what is answered so far goes out first.
                    Poll::Pending => {
                        self.flush().await?;
                        match answer_unless_closed(&self.stream, waiting).await {
                            Some(answer) => answer,
                            None => return Ok(Next::Close),
                        }
                    }
                },
            };
            // The head is written and dropped in this block: kept to the end of the loop's
            // body, it (and the answer) would take room in this future across the writes.
            let (body, written) = {
                let Answer {
                    response,
                    limit_headers,
                } = answer;
                let (head, body) = response.into_parts();
                let written = encode_head(
                    &mut self.bufs.out,
                    &head,
                    &body,
                    limit_headers.as_ref(),
                    &framing,
                );
                (body, written)
            };
            self.write_body(body, written.body).await?;
            if !written.keep_alive {
                return Ok(Next::Close);
            }
            if self.bufs.out.len() >= MAX_BUFFERED_OUTPUT {
                self.flush().await?;
            }
        }
    }

    /// Append (or stream) the body after its head, as `encoding` says.
    // A plain fn returning an `async move` block that uses `body` in place: an `async fn`
    // (or a binding moved out of it) would keep the body twice in the state.
    #[allow(clippy::manual_async_fn)]
    fn write_body(
        &mut self,
        mut body: ProxyBody,
        encoding: BodyEncoding,
    ) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        async move {
            if encoding == BodyEncoding::Length(0) {
                return Ok(());
            }
            match &body {
                ProxyBody::Full(Some(bytes)) => self.append(bytes, encoding).await?,
                ProxyBody::Full(None) | ProxyBody::Empty => {}
                ProxyBody::Streamed(_)
                | ProxyBody::Downstream(..)
                | ProxyBody::H1(_)
                | ProxyBody::Boxed(_) => {
                    loop {
                        let frame = match futures_util::poll!(body.frame()) {
                            Poll::Ready(frame) => frame,
                            // Nothing more yet: let the client have what there is (a slow or
                            // streaming upstream must not hold the head back).
                            Poll::Pending => {
                                self.flush().await?;
                                body.frame().await
                            }
                        };
                        match frame {
                            None => break,
                            Some(Ok(frame)) => {
                                if let Ok(data) = frame.into_data() {
                                    self.append(&data, encoding).await?;
                                }
                            }
                            Some(Err(e)) => return Err(io::Error::other(e)),
                        }
                    }
                }
            }
            if encoding == BodyEncoding::Chunked {
                self.bufs.out.extend_from_slice(response_head::LAST_CHUNK);
            }
            Ok(())
        }
    }

    /// Body bytes into the output (as one chunk when chunked); large ones are written straight
    /// from their buffer.
    async fn append(&mut self, data: &[u8], encoding: BodyEncoding) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let chunked = encoding == BodyEncoding::Chunked;
        if chunked {
            response_head::chunk_size_line(&mut self.bufs.out, data.len());
        }
        if self.bufs.out.len() + data.len() > MAX_BUFFERED_OUTPUT {
            self.flush().await?;
            self.stream.write_all(data).await?;
        } else {
            self.bufs.out.extend_from_slice(data);
        }
        if chunked {
            self.bufs.out.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.bufs.out.is_empty() {
            self.stream.write_all(&self.bufs.out).await?;
            self.bufs.out.clear();
        }
        Ok(())
    }
}

/// The pipeline's answer, or `None` when the client closes its connection first: the answer's
/// future is dropped, which counts and logs the request as Envoy's `DC` and abandons its
/// upstream request, as Envoy (and hyper's server) do. Bytes sent meanwhile (a pipelined
/// request) end the watch: they are read after the answer. The watch is the socket's read
/// readiness (its waker slot, no waiter to add and remove): no syscall until the socket turns
/// readable, its readiness having been cleared by the last read.
async fn answer_unless_closed(
    stream: &TcpStream,
    mut waiting: std::pin::Pin<Box<dyn std::future::Future<Output = Answer> + Send + '_>>,
) -> Option<Answer> {
    let mut watching = true;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = waiting.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        while watching {
            match stream.poll_read_ready(cx) {
                Poll::Pending => break,
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(())) => match peek_one(stream) {
                    // End of stream: the client closed.
                    Ok(0) => return Poll::Ready(None),
                    Ok(_) => watching = false,
                    // Readiness was stale and is cleared now: wait for it again.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return Poll::Ready(None),
                },
            }
        }
        Poll::Pending
    })
    .await
}

/// Whether the client sent bytes (`> 0`), closed (`0`), or nothing is there (`WouldBlock`,
/// which clears the socket's read readiness).
fn peek_one(stream: &TcpStream) -> io::Result<usize> {
    stream.try_io(tokio::io::Interest::READABLE, || {
        let mut one = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        socket2::SockRef::from(stream).peek(&mut one)
    })
}

/// A request the fast path answers: the request with an empty header map and its lines as
/// read, or (when the lines cannot be kept that way) with its map; its framing and head length.
type NextRequest = (Request<ProxyBody>, Option<RequestLines>, Framing, usize);

/// The first request head in `input`: one to answer here, or where the connection goes
/// instead. Parsed outside `answer_buffered`'s body: the header slots (2 KiB) then live on the
/// stack only, not in the boxed future of every connection that is answering (2664 -> 968
/// bytes).
fn next_head(input: &[u8]) -> ControlFlow<Next, NextRequest> {
    let mut slots = request_head::header_slots();
    match request_head::parse(input, &mut slots) {
        Parsed::Partial => ControlFlow::Break(Next::Read),
        Parsed::Hyper => ControlFlow::Break(Next::Hyper),
        Parsed::Fast(head) => {
            // A `Connection` naming headers: the map path strips them.
            let lines = match head.connection_names {
                false => RequestLines::new(head.headers),
                true => None,
            };
            let headers = match lines {
                Some(_) => Some(HeaderMap::new()),
                None => header_map(&head),
            };
            match headers.and_then(|headers| to_request(&head, headers)) {
                None => ControlFlow::Break(Next::Hyper),
                Some(request) => {
                    let framing = Framing {
                        http10: head.http10,
                        keep_alive: head.keep_alive,
                        head: head.method == Method::HEAD,
                    };
                    ControlFlow::Continue((request, lines, framing, head.len))
                }
            }
        }
    }
}

/// The head's lines as a header map (a `Connection` naming headers); `None` when a line is not
/// valid for `http`, which hyper then judges.
fn header_map(head: &FastRequest<'_, '_>) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(head.headers.len() + forwarding_headers::ADDED);
    for line in head.headers {
        let name = HeaderName::from_bytes(line.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(line.value).ok()?;
        headers.append(name, value);
    }
    Some(headers)
}

/// The parsed head as the request the pipeline takes (what hyper would have built); `None`
/// when the target is not valid for `http`, which hyper then judges.
fn to_request(head: &FastRequest<'_, '_>, headers: HeaderMap) -> Option<Request<ProxyBody>> {
    let uri = Uri::from_maybe_shared(Bytes::copy_from_slice(head.target.as_bytes())).ok()?;
    let mut request = Request::new(ProxyBody::Empty);
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = uri;
    *request.version_mut() = if head.http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    *request.headers_mut() = headers;
    Some(request)
}

/// A response head written as hyper writes it, for the body it has; `limit_headers` (see
/// [`pipeline::Answer`]) in place of any lines of their names.
fn encode_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    body: &ProxyBody,
    limit_headers: Option<&RateLimitHeaders>,
    framing: &Framing,
) -> Written {
    let status = parts.status;
    let reason = match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(reason) => reason.as_bytes(),
        None => status_phrase(status).as_bytes(),
    };
    let length = match body {
        ProxyBody::Full(Some(bytes)) => BodyLength::Known(bytes.len() as u64),
        ProxyBody::Full(None) | ProxyBody::Empty => BodyLength::Empty,
        streamed if streamed.is_end_stream() => BodyLength::Empty,
        streamed => streamed
            .size_hint()
            .exact()
            .map_or(BodyLength::Unknown, BodyLength::Known),
    };
    let head = Head {
        status,
        reason,
        http10: parts.version == Version::HTTP_10,
        headers: (),
        body: length,
    };
    let map_lines = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let date = http_date::now();
    // Before `unread`, whose lines they are chained with: dropped after it.
    let (mut l, mut r, mut s) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    // An upstream's header lines nothing read into the map are written as they were read.
    let unread = match body {
        ProxyBody::H1(body) => Some(body.unread_header_lines(&parts.headers)),
        _ => None,
    };
    let Some(limit_headers) = limit_headers else {
        // No limiter headers (most responses): no filtering, fewer iterator layers per line.
        return match unread {
            None => response_head::encode(out, framing, head.with_headers(map_lines), &date),
            Some(unread) => response_head::encode(
                out,
                framing,
                head.with_headers(unread.chain(map_lines)),
                &date,
            ),
        };
    };
    let [limit, remaining, reset] = limit_headers.values();
    let [ln, rn, sn] = RateLimitHeaders::NAMES.map(str::as_bytes);
    let limit_lines = [
        (ln, l.format(limit).as_bytes()),
        (rn, r.format(remaining).as_bytes()),
        (sn, s.format(reset).as_bytes()),
    ];
    let kept = |(name, _): &(&[u8], &[u8])| {
        !RateLimitHeaders::NAMES
            .iter()
            .any(|n| n.as_bytes() == *name)
    };
    // Two arms rather than one `Option` flattened: a flattening adapter costs every line
    // (a third of encoding a passed request's head, measured).
    match unread {
        None => {
            let headers = map_lines.filter(kept).chain(limit_lines);
            response_head::encode(out, framing, head.with_headers(headers), &date)
        }
        Some(unread) => {
            let headers = unread.chain(map_lines).filter(kept).chain(limit_lines);
            response_head::encode(out, framing, head.with_headers(headers), &date)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fast path makes of the bytes read so far: `read`, `hyper`, or the request it
    /// answers (method, target, whether its lines stay as read, keep-alive, HTTP/1.0, HEAD,
    /// head length).
    fn next(input: &[u8]) -> String {
        match next_head(input) {
            ControlFlow::Break(Next::Read) => "read".into(),
            ControlFlow::Break(Next::Hyper) => "hyper".into(),
            ControlFlow::Break(Next::Close) => "close".into(),
            ControlFlow::Continue((req, lines, framing, len)) => format!(
                "{} {} lines={} keep={} h10={} head={} len={len}",
                req.method(),
                req.uri(),
                lines.is_some(),
                framing.keep_alive,
                framing.http10,
                framing.head,
            ),
        }
    }

    #[test]
    fn request_heads_are_answered_here_or_handed_to_hyper() {
        #[rustfmt::skip]
        let cases: &[(&[u8], &str)] = &[
            (b"", "read"),
            (b"GET / HTTP/1.1\r\nHost: a", "read"),
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / lines=true keep=true h10=false head=false len=27"),
            (b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n", "HEAD /x lines=true keep=true h10=false head=true len=29"),
            (b"GET /q?a=1 HTTP/1.0\r\nHost: a\r\n\r\n", "GET /q?a=1 lines=true keep=false h10=true head=false len=32"),
            (b"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", "GET / lines=true keep=true h10=true head=false len=51"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "GET / lines=true keep=false h10=false head=false len=46"),
            // `Connection` naming a header: the lines go into a map, which strips them.
            (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x-drop\r\nx-drop: 1\r\n\r\n", "GET / lines=false keep=true h10=false head=false len=58"),
            // Bodies, upgrades and h2c are hyper's.
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", "hyper"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", "hyper"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", "hyper"),
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "hyper"),
        ];
        for (input, want) in cases {
            assert_eq!(next(input), *want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn codes_without_a_reason_are_unknown_as_envoy_writes_them() {
        assert_eq!(status_phrase(StatusCode::OK), "OK");
        assert_eq!(
            status_phrase(StatusCode::TOO_MANY_REQUESTS),
            "Too Many Requests"
        );
        let seed = StatusCode::from_u16(333).expect("333");
        assert_eq!(status_phrase(seed), "Unknown");
    }
}
