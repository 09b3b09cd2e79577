//! `envoy.service.ratelimit.v3.RateLimitService` over tonic; errors go out as UNKNOWN with the
//! reference's message text.
//!
//! The service is routed by hand (as tonic's generated server does) so that calls use
//! [`SmallMessageCodec`] instead of the generated server's 8 KiB-per-call buffers.

use crate::grpc_codec::SmallMessageCodec;
use crate::limiter::RateLimiter;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The RLS v3 gRPC service.
#[derive(Clone)]
pub(crate) struct RlsService {
    pub limiter: Arc<RateLimiter>,
}

impl NamedService for RlsService {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl UnaryService<RateLimitRequest> for RlsService {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let limiter = self.limiter.clone();
        Box::pin(async move {
            let started = Instant::now();
            let result = limiter.decide(request.get_ref()).await;
            limiter
                .stats()
                .should_rate_limit(started.elapsed().as_secs_f64());
            match result {
                Ok(response) => Ok(Response::new(response)),
                Err(e) => {
                    tracing::debug!(error = %e, "ShouldRateLimit failed");
                    Err(Status::unknown(e.to_string()))
                }
            }
        })
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for RlsService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
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
            let mut grpc = Grpc::new(SmallMessageCodec::default());
            Ok(grpc.unary(service, request).await)
        })
    }
}
