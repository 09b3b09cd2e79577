//! Where rate limit decisions come from: the embedded limiter (same code as `warden
//! ratelimit`, memory backend) or a remote RLS over one long-lived HTTP/2 channel.
//!
//! Remote channels are per worker thread, like Envoy's per-worker gRPC clients: a worker's
//! decisions go out on its own HTTP/2 connection, driven by its own single-threaded runtime,
//! with no hop to another thread and back per request. Channels are kept per worker and
//! address, so a config reload reuses the connection; they connect lazily and reconnect by
//! themselves after the service comes back.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use warden_ratelimit::{RateLimitRequest, RateLimitResponse, RateLimiter};

#[derive(Debug, thiserror::Error)]
pub enum RlsCallError {
    #[error("rate limit service call timed out after {0:?}")]
    Timeout(Duration),
    #[error("rate limit service error: {0}")]
    Status(Box<tonic::Status>),
    #[error("embedded rate limiter error: {0}")]
    Embedded(#[from] warden_ratelimit::RlsError),
}

#[derive(Debug, thiserror::Error)]
pub enum RlsSetupError {
    #[error("invalid rate limit service address {address:?}: {reason}")]
    Address { address: String, reason: String },
}

#[derive(Debug, Clone)]
pub enum RlsBackend {
    Embedded(Arc<RateLimiter>),
    Remote {
        /// Boxed: an Endpoint is large, and the enum is cloned into every snapshot.
        endpoint: Box<Endpoint>,
        address: Arc<str>,
        timeout: Duration,
    },
}

thread_local! {
    /// This thread's channels by RLS address. A worker thread lives as long as its runtime,
    /// which drives the channels' connection tasks.
    static CHANNELS: RefCell<HashMap<Arc<str>, Channel>> = RefCell::new(HashMap::new());
}

/// This worker's channel to `address`, created on first use (inside the worker's runtime).
fn worker_client(address: &Arc<str>, endpoint: &Endpoint) -> RateLimitServiceClient<Channel> {
    let channel = CHANNELS.with(|channels| {
        channels
            .borrow_mut()
            .entry(address.clone())
            .or_insert_with(|| endpoint.connect_lazy())
            .clone()
    });
    RateLimitServiceClient::new(channel)
}

/// How long a timed-out call may still finish in the background, and how many may at once.
const LATE_ANSWER_WAIT: Duration = Duration::from_secs(2);
const MAX_LATE_CALLS: usize = 4096;
static LATE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Let a timed-out call finish so its answer is not lost: under overload every call can miss
/// its deadline, and an OVER_LIMIT that arrives late still lets the over-limit cache answer the
/// client's next requests locally (otherwise every request fails open and the limit never
/// holds). Beyond the bound the call is dropped, as Envoy does with all of them.
fn finish_late<F, T>(call: F, late: impl FnOnce(&RateLimitResponse) + Send + 'static)
where
    F: std::future::Future<Output = Result<tonic::Response<RateLimitResponse>, T>> + Send + 'static,
{
    if LATE_CALLS.fetch_add(1, Ordering::Relaxed) >= MAX_LATE_CALLS {
        LATE_CALLS.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    tokio::spawn(async move {
        if let Ok(Ok(resp)) = tokio::time::timeout(LATE_ANSWER_WAIT, call).await {
            late(resp.get_ref());
        }
        LATE_CALLS.fetch_sub(1, Ordering::Relaxed);
    });
}

impl RlsBackend {
    /// A remote RLS at `address` (`host:port`); nothing connects until the first decision.
    pub fn remote(address: &str, timeout: Duration) -> Result<RlsBackend, RlsSetupError> {
        let bad = |reason: String| RlsSetupError::Address {
            address: address.to_string(),
            reason,
        };
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| bad(e.to_string()))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            .http2_keep_alive_interval(Duration::from_secs(30))
            // Every request of the worker in flight at once may wait for a decision.
            .buffer_size(16 * 1024);
        Ok(RlsBackend::Remote {
            endpoint: Box::new(endpoint),
            address: Arc::from(address),
            timeout,
        })
    }

    /// Ask for a decision. A remote call that times out is not dropped: it may finish in the
    /// background (bounded in time and number per worker) and hand its answer to `late`.
    pub async fn should_rate_limit(
        &self,
        request: RateLimitRequest,
        late: impl FnOnce(&RateLimitResponse) + Send + 'static,
    ) -> Result<RateLimitResponse, RlsCallError> {
        match self {
            RlsBackend::Embedded(limiter) => Ok(limiter.decide(&request).await?),
            RlsBackend::Remote {
                endpoint,
                address,
                timeout,
            } => {
                let mut client = worker_client(address, endpoint);
                let mut call = Box::pin(async move { client.should_rate_limit(request).await });
                match tokio::time::timeout(*timeout, &mut call).await {
                    Ok(Ok(resp)) => Ok(resp.into_inner()),
                    Ok(Err(status)) => Err(RlsCallError::Status(Box::new(status))),
                    Err(_) => {
                        finish_late(call, late);
                        Err(RlsCallError::Timeout(*timeout))
                    }
                }
            }
        }
    }
}
