//! Where rate limit decisions come from: the embedded limiter (same code as `warden
//! ratelimit`, memory backend) or a remote RLS over this worker's HTTP/2 connection to it
//! (`rls_connection`).

use super::rls_connection;
use http::uri::Authority;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use warden_ratelimit::{RateLimitRequest, RateLimitResponse, RateLimiter};

#[derive(Debug, thiserror::Error)]
pub enum RlsCallError {
    #[error("rate limit service call timed out after {0:?}")]
    Timeout(Duration),
    #[error("rate limit service error: {0}")]
    Status(Box<tonic::Status>),
    #[error("{0}")]
    Unavailable(Arc<str>),
    #[error("embedded rate limiter error: {0}")]
    Embedded(#[from] warden_ratelimit::RlsError),
    #[error("rate limit service answered neither OK nor OVER_LIMIT")]
    UnknownCode,
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
        /// `host:port` of the service.
        authority: Authority,
        timeout: Duration,
    },
}

/// One ShouldRateLimit call on this worker's connection to `authority`.
async fn remote_call(
    authority: Authority,
    request: RateLimitRequest,
    ask_lease: bool,
) -> Result<RateLimitResponse, RlsCallError> {
    let connection = rls_connection::get(&authority)
        .await
        .map_err(RlsCallError::Unavailable)?;
    connection
        .should_rate_limit(&request, ask_lease)
        .await
        .map_err(|s| RlsCallError::Status(Box::new(s)))
}

/// How long a timed-out call may still finish in the background, and how many may at once.
const LATE_ANSWER_WAIT: Duration = Duration::from_secs(2);
const MAX_LATE_CALLS: usize = 4096;
static LATE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Let a timed-out call finish so its answer is not lost: under overload every call can miss
/// its deadline, and an OVER_LIMIT that arrives late still lets the over-limit cache answer the
/// client's next requests locally (otherwise every request fails open and the limit never
/// holds). Beyond the bound the call is dropped, as Envoy does with all of them.
fn finish_late<F>(call: F, late: impl FnOnce(&RateLimitResponse) + Send + 'static)
where
    F: std::future::Future<Output = Result<RateLimitResponse, RlsCallError>> + Send + 'static,
{
    if LATE_CALLS.fetch_add(1, Ordering::Relaxed) >= MAX_LATE_CALLS {
        LATE_CALLS.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    tokio::spawn(async move {
        if let Ok(Ok(resp)) = tokio::time::timeout(LATE_ANSWER_WAIT, call).await {
            late(&resp);
        }
        LATE_CALLS.fetch_sub(1, Ordering::Relaxed);
    });
}

impl RlsBackend {
    /// A remote RLS at `address` (`host:port`); nothing connects until the first decision.
    pub fn remote(address: &str, timeout: Duration) -> Result<RlsBackend, RlsSetupError> {
        let authority =
            rls_connection::authority(address).map_err(|reason| RlsSetupError::Address {
                address: address.to_string(),
                reason,
            })?;
        Ok(RlsBackend::Remote { authority, timeout })
    }

    /// How long a decision may take (the embedded limiter does not wait).
    pub fn timeout(&self) -> Duration {
        match self {
            RlsBackend::Embedded(_) => Duration::ZERO,
            RlsBackend::Remote { timeout, .. } => *timeout,
        }
    }

    /// Ask for a decision (and a quota lease, if `ask_lease`; only a remote service may grant
    /// one). A remote call that times out is not dropped: it may finish in the background
    /// (bounded in time and number) and hand its answer to the handler `late` makes (made only
    /// then).
    pub async fn should_rate_limit<L>(
        &self,
        request: RateLimitRequest,
        ask_lease: bool,
        late: impl FnOnce() -> L,
    ) -> Result<RateLimitResponse, RlsCallError>
    where
        L: FnOnce(&RateLimitResponse) + Send + 'static,
    {
        match self {
            RlsBackend::Embedded(limiter) => Ok(limiter.decide(&request).await?),
            RlsBackend::Remote { authority, timeout } => {
                let mut call = Box::pin(remote_call(authority.clone(), request, ask_lease));
                match tokio::time::timeout(*timeout, &mut call).await {
                    Ok(result) => result,
                    Err(_) => {
                        finish_late(call, late());
                        Err(RlsCallError::Timeout(*timeout))
                    }
                }
            }
        }
    }
}
