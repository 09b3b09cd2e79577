//! `envoy.service.ratelimit.v3.RateLimitService` over tonic; errors go out as UNKNOWN with the
//! reference's message text.

use crate::limiter::RateLimiter;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

pub(crate) struct RlsService {
    pub limiter: Arc<RateLimiter>,
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let result = self.limiter.decide(request.get_ref()).await;
        self.limiter
            .stats()
            .should_rate_limit(started.elapsed().as_secs_f64());
        match result {
            Ok(response) => Ok(Response::new(response)),
            Err(e) => {
                tracing::debug!(error = %e, "ShouldRateLimit failed");
                Err(Status::unknown(e.to_string()))
            }
        }
    }
}
