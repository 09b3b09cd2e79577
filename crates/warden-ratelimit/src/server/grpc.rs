//! `envoy.service.ratelimit.v3.RateLimitService` as a unary handler on hyper's HTTP/2 server;
//! errors go out as UNKNOWN with the reference's message text.
//!
//! The call is read, decided and answered here with [`grpc_frame`] (the client side's framing)
//! instead of tonic's `Grpc::unary`, whose streaming decoder and encoder around each call were
//! about a tenth of the service's CPU per decision under the proxy's load.

use crate::grpc_frame::{self, MessageBuf};
use crate::lease;
use crate::limiter::RateLimiter;
use bytes::{Buf, Bytes};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use http_body_util::BodyExt;
use hyper::body::Frame;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tonic::body::Body;
use tonic::Status;

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The RLS v3 gRPC service.
#[derive(Clone)]
pub(crate) struct RlsService {
    pub limiter: Arc<RateLimiter>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl RlsService {
    async fn should_rate_limit<B>(&self, request: http::Request<B>) -> Result<Bytes, Status>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        // As tonic's server: a compressed call is refused before its body is read.
        if let Some(encoding) = request.headers().get("grpc-encoding") {
            if encoding != "identity" {
                return Err(Status::unimplemented(format!(
                    "Content is compressed with `{}` which isn't supported",
                    String::from_utf8_lossy(encoding.as_bytes())
                )));
            }
        }
        let leasing = request.headers().contains_key(lease::LEASE_HEADER);
        let mut body = std::pin::pin!(request.into_body());
        let mut message = MessageBuf::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Status::internal(format!("reading the call: {e}")))?;
            if let Ok(mut data) = frame.into_data() {
                message.push(data.copy_to_bytes(data.remaining()))?;
            }
        }
        let request: RateLimitRequest = message.decode()?;
        let started = Instant::now();
        let result = if leasing {
            self.limiter.decide_leasing(&request).await
        } else {
            self.limiter.decide(&request).await
        };
        self.limiter
            .stats()
            .should_rate_limit(started.elapsed().as_secs_f64());
        match result {
            Ok(response) => Ok(grpc_frame::encode(&response)),
            Err(e) => {
                tracing::debug!(error = %e, "ShouldRateLimit failed");
                Err(Status::unknown(e.to_string()))
            }
        }
    }
}

/// A unary call's answer: its message, then `grpc-status: 0` in the trailers.
fn ok_response(message: Bytes) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(UnaryAnswer {
        message: Some(message),
        ended: false,
    }));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// An OK answer's body: the message, then `grpc-status: 0`. Its size hint is not exact, so
/// hyper sends no `content-length` (neither does grpc-go): one header fewer for every client
/// to decode and check.
struct UnaryAnswer {
    message: Option<Bytes>,
    ended: bool,
}

impl hyper::body::Body for UnaryAnswer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if std::mem::replace(&mut self.ended, true) {
            return Poll::Ready(None);
        }
        let mut trailers = HeaderMap::with_capacity(1);
        trailers.insert(grpc_frame::GRPC_STATUS, HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for RlsService
where
    B: hyper::body::Body + Send + 'static,
    B::Error: std::fmt::Display,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let service = self.clone();
        Box::pin(async move {
            Ok(match service.should_rate_limit(request).await {
                Ok(message) => ok_response(message),
                Err(status) => status.into_http(),
            })
        })
    }
}
