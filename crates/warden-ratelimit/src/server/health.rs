//! Health: the AND of the store (Redis reachable) and "not shutting down", as the reference's
//! health components; mirrored into `grpc.health.v1` for services "" and "ratelimit".

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
}

impl Health {
    pub fn healthy(&self) -> bool {
        !self.shutting_down.load(Ordering::Relaxed) && self.store.healthy()
    }
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
        stats.redis_healthy.set(i64::from(healthy));
        if last != Some(healthy) {
            let status = if healthy {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            reporter.set_service_status("ratelimit", status).await;
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
