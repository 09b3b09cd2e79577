//! Health: the AND of the store (Redis reachable), "not shutting down" and, with
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, "a config with at least one domain is active", as
//! the reference's health components; mirrored into `grpc.health.v1` for services "" and
//! "ratelimit".

use crate::limiter::RateLimiter;
use crate::store::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

#[derive(Debug)]
pub(crate) struct Health {
    pub store: Store,
    pub shutting_down: AtomicBool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: the config component of health.
    pub config: Option<Arc<RateLimiter>>,
}

impl Health {
    pub fn healthy(&self) -> bool {
        !self.shutting_down.load(Ordering::Relaxed)
            && self.store.healthy()
            && self
                .config
                .as_ref()
                .is_none_or(|l| l.snapshot().is_some_and(|s| !s.config().domains.is_empty()))
    }
}

/// Sets the grpc.health status of both service names.
pub(crate) async fn publish(reporter: &HealthReporter, healthy: bool) {
    let status = if healthy {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    reporter.set_service_status("ratelimit", status).await;
}

/// Probes Redis every `interval` (requests also update its health) and publishes changes.
pub(crate) async fn run_probe(
    health: Arc<Health>,
    reporter: HealthReporter,
    interval: Duration,
    stats: Arc<crate::stats::Stats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last: Option<bool> = None;
    loop {
        if let Store::Redis(redis) = &health.store {
            redis.probe().await;
        }
        let healthy = health.healthy();
        stats.redis_healthy.set(i64::from(health.store.healthy()));
        if last != Some(healthy) {
            publish(&reporter, healthy).await;
            if last.is_some() {
                tracing::warn!(healthy, "rate limit service health changed");
            }
            last = Some(healthy);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}
