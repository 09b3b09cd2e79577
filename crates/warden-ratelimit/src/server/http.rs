//! The HTTP listeners: service (`/json`, `/healthcheck`), debug (`/`, `/rlconfig`, `/metrics`,
//! `/stats`) and the optional Prometheus one.

use super::bans;
use super::health::Health;
use crate::json::{parse_request, response_to_json};
use crate::limiter::RateLimiter;
use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Largest `/json` body accepted.
const MAX_JSON_BODY: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listener {
    Service,
    Debug,
    Prometheus,
}

#[derive(Clone)]
pub(crate) struct HttpCtx {
    pub limiter: Arc<RateLimiter>,
    pub health: Arc<Health>,
    pub listener: Listener,
    pub metrics_path: String,
}

pub(crate) type Reply = Response<Full<Bytes>>;

pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Go's `http.Error(w, http.StatusText(code), code)`, which the reference's `/json` handler
/// answers every failure with: the status text and a newline, as plain text, `nosniff`.
fn go_http_error(status: StatusCode) -> Reply {
    let mut r = text(
        status,
        format!("{}\n", status.canonical_reason().unwrap_or_default()),
    );
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    r
}

pub(crate) fn json(status: StatusCode, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Accepts connections until `shutdown` flips.
pub(crate) async fn serve(
    listener: TcpListener,
    ctx: HttpCtx,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let ctx = ctx.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(route(req, &ctx).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_shutdown.changed() => {}
            }
        });
    }
}

async fn route(req: Request<Incoming>, ctx: &HttpCtx) -> Reply {
    let path = req.uri().path().to_owned();
    match (ctx.listener, path.as_str()) {
        (Listener::Service, "/json") => handle_json(req, ctx).await,
        (Listener::Service, "/healthcheck") => {
            if ctx.health.healthy() {
                text(StatusCode::OK, "OK")
            } else {
                text(StatusCode::INTERNAL_SERVER_ERROR, "unhealthy")
            }
        }
        (Listener::Debug, "/") => text(
            StatusCode::OK,
            "/rlconfig: print out the currently loaded configuration for debugging\n\
             /metrics: Prometheus metrics\n\
             /stats: print out stats\n\
             /bans: list bans in force (JSON); DELETE /bans?key=<key> lifts one\n\
             /bans/authorizationpolicy: the banned remote addresses as an Istio \
             AuthorizationPolicy DENY (?name=, ?namespace=)\n\
             /ratelimit/top: the descriptors answered OVER_LIMIT most, per domain (JSON; ?n=)\n",
        ),
        (Listener::Debug, "/bans") => bans::handle(req, ctx).await,
        (Listener::Debug, "/bans/authorizationpolicy") => {
            bans::authorization_policy(req, ctx).await
        }
        (Listener::Debug, "/ratelimit/top") => json(
            StatusCode::OK,
            ctx.limiter
                .limited()
                .top_json(crate::heavy_hitters::top_n(req.uri().query()))
                .to_string(),
        ),
        (Listener::Debug, "/rlconfig") => {
            let body = ctx.limiter.snapshot().map(|s| s.dump()).unwrap_or_default();
            text(StatusCode::OK, body)
        }
        (Listener::Debug, "/metrics" | "/stats") => metrics(ctx),
        (Listener::Prometheus, p) if p == ctx.metrics_path => metrics(ctx),
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

fn metrics(ctx: &HttpCtx) -> Reply {
    let mut r = text(StatusCode::OK, ctx.limiter.stats().encode());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// `/json`: any method; 200 OK, 429 OVER_LIMIT, 500 UNKNOWN; a body that cannot be read or
/// parsed and a service error are `400 Bad Request` with Go's plain error body, as the
/// reference's `NewJsonHandler` writes them (the reason is only logged there, and here).
async fn handle_json(req: Request<Incoming>, ctx: &HttpCtx) -> Reply {
    let body = match Limited::new(req.into_body(), MAX_JSON_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::warn!(error = %e, "/json: cannot read the body");
            return go_http_error(StatusCode::BAD_REQUEST);
        }
    };
    let request = match parse_request(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "/json: bad request");
            return go_http_error(StatusCode::BAD_REQUEST);
        }
    };
    match ctx.limiter.decide(&request).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            json(status, response_to_json(&response).to_string())
        }
        Err(e) => {
            tracing::warn!(error = %e, "/json: service error");
            go_http_error(StatusCode::BAD_REQUEST)
        }
    }
}
