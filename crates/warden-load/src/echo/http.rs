//! The HTTP side of the echo server: h1 and h2c (prior knowledge) on one port. Every connection
//! starts on the HTTP/1.1 fast path ([`super::fast_h1`]); hyper ([`HyperEcho`]) takes over h2c
//! and whatever the fast path leaves to it.

use super::body::EchoBody;
use super::counts::{ConnectionCounts, SourceCounts};
use super::fast_h1;
use super::reply::{Plan, Reply, ReplyBody};
use futures_util::future::{ready, Either, Ready};
use http::header::CONTENT_TYPE;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use warden_http1::replay_io::ReplayIo;

type HyperReply = Result<Response<EchoBody>, Infallible>;
type HandlerFuture = Either<Ready<HyperReply>, Pin<Box<dyn Future<Output = HyperReply> + Send>>>;

pub(super) async fn serve(
    listener: TcpListener,
    counts: Arc<SourceCounts>,
    stop: watch::Receiver<bool>,
) {
    let hyper = Arc::new(HyperEcho::new());
    super::accept_loop(listener, stop, |stream, peer| {
        let counts = counts.for_connection(canonical(peer.ip()));
        let hyper = hyper.clone();
        async move { fast_h1::serve(stream, counts, &hyper).await }
    })
    .await
}

/// IPv4 clients of a dual-stack listener show up as ::ffff:a.b.c.d; count them as a.b.c.d.
pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// hyper's h1 + h2c server with the echo handler, for connections (or their rest) the fast path
/// does not answer itself.
pub(super) struct HyperEcho {
    builder: auto::Builder<TokioExecutor>,
}

impl HyperEcho {
    pub(super) fn new() -> HyperEcho {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // No header-read timeout: it arms a timer per request, and this server is a benchmark
        // backend on loopback, not an edge exposed to slowloris clients.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(None);
        builder.http2().timer(TokioTimer::new());
        HyperEcho { builder }
    }

    /// Serve the connection to its end; `io` replays what the fast path already read.
    pub(super) async fn serve<S>(&self, io: ReplayIo<S>, counts: ConnectionCounts)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = service_fn(move |req| handle(req, &counts));
        let _ = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .await;
    }
}

fn handle(req: Request<Incoming>, counts: &ConnectionCounts) -> HandlerFuture {
    let reply = Plan::new(req.uri().path(), req.uri().query()).reply(req.method(), counts);
    let delay = reply.delay;
    let response = into_response(reply, req);
    if delay.is_zero() {
        Either::Left(ready(Ok(response)))
    } else {
        Either::Right(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(response)
        }))
    }
}

fn into_response(reply: Reply, req: Request<Incoming>) -> Response<EchoBody> {
    let body = match reply.body {
        ReplyBody::Empty => EchoBody::Empty,
        ReplyBody::Pattern(n) => EchoBody::Pattern { remaining: n },
        ReplyBody::Text(text) => EchoBody::text(text),
        ReplyBody::RequestBody if http_body::Body::is_end_stream(req.body()) => EchoBody::Empty,
        ReplyBody::RequestBody => return echo_request_body(reply, req),
    };
    let mut response = Response::new(body);
    *response.status_mut() = reply.status;
    *response.headers_mut() = reply.headers;
    response
}

/// The request body streamed back; it keeps its content type, ahead of any `header=`.
fn echo_request_body(reply: Reply, req: Request<Incoming>) -> Response<EchoBody> {
    let content_type = req.headers().get(CONTENT_TYPE).cloned();
    let mut response = Response::new(EchoBody::Echo(req.into_body()));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    if let Some(content_type) = content_type {
        headers.insert(CONTENT_TYPE, content_type);
    }
    for (name, value) in &reply.headers {
        headers.append(name, value.clone());
    }
    response
}
