//! One gRPC connection served by hyper's HTTP/2 server directly: calls are routed by path;
//! ShouldRateLimit is read and answered with `grpc_frame` (`grpc.rs`), health by tonic-health. tonic's own server stack (axum router,
//! body and extension wrappers, boxed services per call) was about a tenth of a decision's CPU.
//! What it did that matters here is kept: HTTP/2 only, no limit on concurrent streams, the
//! client's `grpc-timeout`, `GRPC_MAX_CONNECTION_AGE`(+`_GRACE`) and graceful shutdown.

use super::grpc::RlsService;
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::time::Duration;
use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::Status;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;

const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The services of the gRPC listener, cloned into every call.
#[derive(Clone)]
pub(crate) struct GrpcRoutes {
    pub rls: RlsService,
    pub health: HealthServer<HealthService>,
}

/// Per-connection settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnLimits {
    /// `GRPC_MAX_CONNECTION_AGE`: then a graceful GOAWAY.
    pub max_age: Duration,
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`: then the connection is closed.
    pub max_age_grace: Duration,
}

type CallFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl GrpcRoutes {
    fn call(&self, request: Request<Incoming>) -> CallFuture {
        let timeout = grpc_timeout(request.headers());
        let call: CallFuture = if request.uri().path().starts_with(HEALTH_PREFIX) {
            let mut health = self.health.clone();
            Box::pin(async move { health.call(request).await })
        } else {
            // Answers UNIMPLEMENTED for any other path.
            self.rls.clone().call(request)
        };
        match timeout {
            None => call,
            Some(limit) => Box::pin(async move {
                match tokio::time::timeout(limit, call).await {
                    Ok(response) => response,
                    Err(_) => Ok(Status::cancelled("Timeout expired").into_http()),
                }
            }),
        }
    }
}

/// The client's deadline (`grpc-timeout`: at most 8 digits and a unit); an invalid header is
/// ignored, as tonic does.
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let unit_at = text.len().checked_sub(1)?;
    let (value, unit) = (text.get(..unit_at)?, text.get(unit_at..)?);
    if value.is_empty() || value.len() > 8 {
        return None;
    }
    let value: u64 = value.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// Serves `stream` until the client closes it, its age runs out, or `shutdown` flips (then
/// in-flight calls finish first).
pub(crate) async fn serve<S>(
    stream: S,
    routes: GrpcRoutes,
    limits: ConnLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        // No limit on concurrent streams per connection, as grpc-go (the reference): an Envoy
        // worker sends all its decisions over one connection (hyper's default is 200).
        .max_concurrent_streams(u32::MAX)
        // No `date` on answers either, as grpc-go: every client would decode a new value each
        // second, and nothing reads it.
        .auto_date_header(false);
    let service = hyper::service::service_fn(move |request| routes.call(request));
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    // First the connection's age, then (after a graceful GOAWAY) its grace period.
    let mut timer = pin!(tokio::time::sleep(limits.max_age));
    let (mut in_grace, mut timer_off, mut signalled) = (false, false, false);
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "gRPC connection ended with an error");
                }
                return;
            }
            _ = shutdown.wait_for(|stop| *stop), if !signalled => {
                signalled = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = timer.as_mut(), if !timer_off => {
                if in_grace {
                    tracing::debug!("gRPC connection closed after its age and grace period");
                    return;
                }
                in_grace = true;
                conn.as_mut().graceful_shutdown();
                match tokio::time::Instant::now().checked_add(limits.max_age_grace) {
                    Some(deadline) => timer.as_mut().reset(deadline),
                    // A grace too long to represent: wait for the client to leave.
                    None => timer_off = true,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_header() {
        let parse = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(parse("20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse("123456789m"), None);
        assert_eq!(parse("m"), None);
        assert_eq!(parse("10x"), None);
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }
}
