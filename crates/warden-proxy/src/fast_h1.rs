//! The HTTP/1.1 fast path of a downstream connection, for answers the proxy makes itself.
//!
//! A request that gets no route (404), a direct response, or a denial from authz (403) or the
//! local limiter (429) never needs hyper's machinery: such body-less requests are parsed from the
//! read buffer, decided by [`pipeline::answer_locally`] (the same stages, metrics and access log
//! as hyper's requests) and answered into one output buffer, pipelined ones in order with one
//! write. This is what an attacker's requests cost, and what a direct responder costs.
//!
//! Everything else goes to hyper with the bytes already read ([`ReplayIo`]), from the first
//! request on that needs an upstream or the global limiter, has a body, or is anything
//! [`request_head`] does not vouch for; h2c goes to hyper from its first byte. hyper keeps the
//! connection from then on. Responses already answered here are written before it takes over.

use crate::body::ProxyBody;
use crate::framing_guard::FramingGuard;
use crate::pipeline::{self, FastRequest};
use crate::state::{ConnCtx, WorkerCtx};
use bytes::{Buf, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::convert::Infallible;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use warden_http1::http_date::{self, DATE_LEN};
use warden_http1::replay_io::ReplayIo;
use warden_http1::request_head::{self, Parsed};
use warden_http1::response_head::{self, Framing};

const READ_SIZE: usize = 8 * 1024;
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
}

/// Serve one accepted HTTP connection until it closes.
pub async fn serve(mut stream: TcpStream, mut serving: Serving) {
    let mut input = BytesMut::with_capacity(READ_SIZE);
    tokio::select! {
        read = stream.read_buf(&mut input) => match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        },
        _ = serving.stop.changed() => return,
    }
    if warden_http1::starts_like_h2(&input) {
        return with_hyper(stream, input, serving).await;
    }
    let mut fast = Connection {
        stream,
        input,
        out: Vec::with_capacity(READ_SIZE),
        headers: HeaderMap::new(),
    };
    loop {
        let next = fast.answer_buffered(&serving).await;
        if fast.flush().await.is_err() {
            return;
        }
        match next {
            Ok(Next::Read) if fast.input.len() < serving.max_head => {
                fast.input.reserve(READ_SIZE);
                tokio::select! {
                    read = fast.stream.read_buf(&mut fast.input) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    },
                    // Draining: close between requests, as hyper does with an idle connection.
                    _ = serving.stop.changed() => return,
                }
            }
            Ok(Next::Read | Next::Hyper) => {
                return with_hyper(fast.stream, fast.input, serving).await;
            }
            Ok(Next::Close) => {
                let _ = fast.stream.shutdown().await;
                return;
            }
            Err(_) => return,
        }
    }
}

/// hyper serves the rest of the connection, starting with the bytes in `input`.
async fn with_hyper(stream: TcpStream, input: BytesMut, serving: Serving) {
    let Serving {
        conn,
        worker,
        hyper,
        watcher,
        violation,
        ..
    } = serving;
    let io = TokioIo::new(FramingGuard::new(
        ReplayIo::new(input.freeze(), stream),
        violation,
    ));
    let service = hyper::service::service_fn(move |req| {
        let worker = worker.clone();
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(pipeline::handle(req, &conn, &worker).await) }
    });
    if let Err(e) = watcher
        .watch(hyper.serve_connection(io, service).into_owned())
        .await
    {
        tracing::debug!(error = %e, "downstream connection error");
    }
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
    /// Read and not yet answered.
    input: BytesMut,
    /// Responses not yet written.
    out: Vec<u8>,
    /// The current request's headers; reused so a request allocates no map.
    headers: HeaderMap,
}

impl Connection {
    /// Answer every complete request in `input` that the proxy answers itself, in order.
    async fn answer_buffered(&mut self, serving: &Serving) -> io::Result<Next> {
        let date = http_date::now();
        loop {
            let mut slots = request_head::header_slots();
            let request = match request_head::parse(&self.input, &mut slots) {
                Parsed::Partial => return Ok(Next::Read),
                Parsed::Hyper => return Ok(Next::Hyper),
                Parsed::Fast(request) => request,
            };
            if !fill_headers(&mut self.headers, request.headers) {
                return Ok(Next::Hyper);
            }
            let authority = match self.headers.get(header::HOST) {
                Some(host) => match host.to_str() {
                    Ok(host) => host,
                    Err(_) => return Ok(Next::Hyper),
                },
                None => "",
            };
            let fast = FastRequest {
                method: &request.method,
                version: if request.http10 {
                    http::Version::HTTP_10
                } else {
                    http::Version::HTTP_11
                },
                path: request.path,
                authority,
                headers: &self.headers,
            };
            let Some(response) = pipeline::answer_locally(&fast, &serving.conn, &serving.worker)
            else {
                return Ok(Next::Hyper);
            };
            let framing = Framing {
                http10: request.http10,
                keep_alive: request.keep_alive,
                head: request.method == Method::HEAD,
            };
            let len = request.len;
            encode(&mut self.out, &response, &framing, &date);
            self.input.advance(len);
            if !framing.keep_alive {
                return Ok(Next::Close);
            }
            if self.out.len() >= MAX_BUFFERED_OUTPUT {
                self.flush().await?;
            }
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }
}

/// The request's header lines as a header map (what the pipeline's stages read); false when a
/// line is not a valid header, which hyper then judges.
fn fill_headers(map: &mut HeaderMap, lines: &[httparse::Header<'_>]) -> bool {
    map.clear();
    for line in lines {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line.name.as_bytes()),
            HeaderValue::from_bytes(line.value),
        ) else {
            return false;
        };
        map.append(name, value);
    }
    true
}

/// A local reply written as hyper writes it: its reason phrase (or the one set by the
/// pipeline), its headers in order, then length and date.
fn encode(
    out: &mut Vec<u8>,
    response: &Response<ProxyBody>,
    framing: &Framing,
    date: &[u8; DATE_LEN],
) {
    let status = response.status();
    let reason = match response.extensions().get::<hyper::ext::ReasonPhrase>() {
        Some(reason) => reason.as_bytes(),
        None => response_head::default_reason(status).as_bytes(),
    };
    let body: &[u8] = match response.body() {
        ProxyBody::Full(Some(bytes)) => bytes,
        // Local replies are built from bytes; a streamed body never gets here.
        ProxyBody::Full(None) | ProxyBody::Empty | ProxyBody::Streamed(_) => &[],
    };
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    if response_head::encode(out, framing, status, reason, headers, body.len(), date) {
        out.extend_from_slice(body);
    }
}
