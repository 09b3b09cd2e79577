//! Config loading and reload: poll the source's file list (paths, sizes, mtimes, symlink
//! targets) so Kubernetes `..data` symlink swaps, edits, creates and deletes all trigger a full
//! reload; a bad config is logged and counted and the previous one stays active.

use crate::config::{load_config_set, ConfigSource};
use crate::limiter::RateLimiter;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Loads `source` into `limiter`; returns the error text on failure (old config kept).
pub fn load_into(limiter: &RateLimiter, source: &ConfigSource, merge: bool) -> Result<(), String> {
    match load_config_set(source, merge) {
        Ok(set) => {
            for config in set.domains.values() {
                for note in crate::config::warden_extensions(config) {
                    tracing::info!(domain = %config.domain, "config uses a warden extension: {note}");
                }
            }
            limiter.set_config(set);
            limiter.stats().config_load_success.inc();
            Ok(())
        }
        Err(e) => {
            limiter.stats().config_load_error.inc();
            tracing::error!("Error loading new configuration: {e}");
            Err(e.to_string())
        }
    }
}

fn fingerprint(source: &ConfigSource) -> String {
    match source.files() {
        Ok(files) => format!("{files:?}"),
        Err(e) => format!("error: {e}"),
    }
}

pub(crate) async fn watch_config(
    limiter: Arc<RateLimiter>,
    source: ConfigSource,
    merge: bool,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = fingerprint(&source);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let source_for_scan = source.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&source_for_scan)).await
        else {
            continue;
        };
        if now != last {
            last = now;
            let (l, s) = (limiter.clone(), source.clone());
            let _ = tokio::task::spawn_blocking(move || {
                if load_into(&l, &s, merge).is_ok() {
                    tracing::info!("rate limit configuration reloaded");
                }
            })
            .await;
        }
    }
}
