//! Where rate limit decisions come from: the embedded limiter (same code as `warden
//! ratelimit`, memory backend) or a remote RLS over one long-lived HTTP/2 channel.
//!
//! Remote channels live on one small background runtime shared by the process: workers run
//! single-threaded runtimes, and a channel's connection task must keep running whichever
//! worker is busy. Channels are kept per address, so a config reload reuses the connection.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
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
    #[error("cannot start the rate limit client runtime: {0}")]
    Runtime(String),
}

#[derive(Debug, Clone)]
pub enum RlsBackend {
    Embedded(Arc<RateLimiter>),
    Remote {
        client: RateLimitServiceClient<Channel>,
        address: String,
        timeout: Duration,
    },
}

fn client_runtime() -> Result<&'static tokio::runtime::Runtime, RlsSetupError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("warden-rls-client")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| RlsSetupError::Runtime(e.clone()))
}

/// The process-wide channel to `address` (`host:port`), created on first use; it connects
/// lazily and reconnects by itself after the service comes back.
fn channel(address: &str) -> Result<Channel, RlsSetupError> {
    static CHANNELS: OnceLock<Mutex<HashMap<String, Channel>>> = OnceLock::new();
    let mut map = CHANNELS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(c) = map.get(address) {
        return Ok(c.clone());
    }
    let bad = |reason: String| RlsSetupError::Address {
        address: address.to_string(),
        reason,
    };
    let endpoint = Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| bad(e.to_string()))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
        .http2_keep_alive_interval(Duration::from_secs(30))
        // Many workers share the channel; a small buffer would queue decisions.
        .buffer_size(16 * 1024);
    let rt = client_runtime()?;
    let _enter = rt.enter();
    let channel = endpoint.connect_lazy();
    map.insert(address.to_string(), channel.clone());
    Ok(channel)
}

impl RlsBackend {
    pub fn remote(address: &str, timeout: Duration) -> Result<RlsBackend, RlsSetupError> {
        Ok(RlsBackend::Remote {
            client: RateLimitServiceClient::new(channel(address)?),
            address: address.to_string(),
            timeout,
        })
    }

    pub async fn should_rate_limit(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, RlsCallError> {
        match self {
            RlsBackend::Embedded(limiter) => Ok(limiter.decide(&request).await?),
            RlsBackend::Remote {
                client, timeout, ..
            } => {
                let mut client = client.clone();
                match tokio::time::timeout(*timeout, client.should_rate_limit(request)).await {
                    Ok(Ok(resp)) => Ok(resp.into_inner()),
                    Ok(Err(status)) => Err(RlsCallError::Status(Box::new(status))),
                    Err(_) => Err(RlsCallError::Timeout(*timeout)),
                }
            }
        }
    }
}
