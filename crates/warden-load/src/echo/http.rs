//! The HTTP side of the echo server: h1 and h2c (prior knowledge) on one port.

use super::body::EchoBody;
use super::counts::SourceCounts;
use super::params::EchoParams;
use futures_util::future::{ready, Either, Ready};
use http::header::{ALLOW, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// `GET` reports requests served per source IP as JSON, `DELETE` reports and resets them.
/// Requests to this path are never counted themselves.
pub const COUNT_PATH: &str = "/count";

type Reply = Result<Response<EchoBody>, Infallible>;
type HandlerFuture = Either<Ready<Reply>, Pin<Box<dyn Future<Output = Reply> + Send>>>;

pub(super) async fn serve(
    listener: TcpListener,
    counts: Arc<SourceCounts>,
    stop: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No header-read timeout: it arms a timer per request, and this server is a benchmark
    // backend on loopback, not an edge exposed to slowloris clients.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    super::accept_loop(listener, stop, |stream, peer| {
        let counter = counts.counter_for(canonical(peer.ip()));
        let counts = counts.clone();
        let builder = builder.clone();
        async move {
            let service = service_fn(move |req| handle(req, &counter, &counts));
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await
}

/// IPv4 clients of a dual-stack listener show up as ::ffff:a.b.c.d; count them as a.b.c.d.
pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

fn handle(req: Request<Incoming>, counter: &AtomicU64, counts: &SourceCounts) -> HandlerFuture {
    if req.uri().path() == COUNT_PATH {
        return Either::Left(ready(Ok(count_endpoint(req.method(), counts))));
    }
    counter.fetch_add(1, Ordering::Relaxed);
    let params = match req.uri().query().map(EchoParams::parse) {
        None => EchoParams::default(),
        Some(Ok(params)) => params,
        Some(Err(err)) => {
            return Either::Left(ready(Ok(plain(
                StatusCode::BAD_REQUEST,
                format!("bad echo parameter {err}\n"),
            ))))
        }
    };
    let resolved = params.resolve(|| fastrand::f64() * 100.0);
    let mut content_type = None;
    let body = match resolved.size {
        Some(0) => EchoBody::Empty,
        Some(n) => EchoBody::Pattern { remaining: n },
        None if http_body::Body::is_end_stream(req.body()) => EchoBody::Empty,
        None => {
            content_type = req.headers().get(CONTENT_TYPE).cloned();
            EchoBody::Echo(req.into_body())
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = resolved.status;
    let headers = response.headers_mut();
    if let Some(ct) = content_type {
        headers.insert(CONTENT_TYPE, ct);
    }
    for (name, value) in params.headers {
        headers.append(name, value);
    }
    if resolved.delay.is_zero() {
        Either::Left(ready(Ok(response)))
    } else {
        Either::Right(Box::pin(async move {
            tokio::time::sleep(resolved.delay).await;
            Ok(response)
        }))
    }
}

fn count_endpoint(method: &Method, counts: &SourceCounts) -> Response<EchoBody> {
    let report = |counts: &SourceCounts| {
        let by_ip: serde_json::Map<String, serde_json::Value> = counts
            .snapshot()
            .into_iter()
            .map(|(ip, n)| (ip.to_string(), n.into()))
            .collect();
        let total: u64 = by_ip.values().filter_map(|v| v.as_u64()).sum();
        serde_json::json!({ "total": total, "by_ip": by_ip }).to_string() + "\n"
    };
    let text = match *method {
        Method::GET | Method::HEAD => report(counts),
        Method::DELETE => {
            let before = report(counts);
            counts.reset();
            before
        }
        _ => {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or DELETE\n");
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD, DELETE"));
            return response;
        }
    };
    let mut response = Response::new(EchoBody::text(text));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn plain(status: StatusCode, text: impl Into<bytes::Bytes>) -> Response<EchoBody> {
    let mut response = Response::new(EchoBody::text(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}
