//! State shared by every worker (the current snapshot, metrics, logging, reload), one worker's
//! context (its upstream pools) and one connection's context.

use crate::access_log::AccessLog;
use crate::metrics::Metrics;
use crate::options::ConfigSource;
use crate::snapshot::{ListenerProtocol, ProxyIdentity, Snapshot};
use crate::upstream::UpstreamClients;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use warden_config::ConfigErrors;

/// A bound listener as `/listeners` and [`crate::RunningProxy::listeners`] report it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListenerInfo {
    pub name: String,
    pub port_in_config: u16,
    pub protocol: ListenerProtocol,
    pub addr: SocketAddr,
}

pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub metrics: Metrics,
    pub access_log: Option<AccessLog>,
    pub num_trusted_proxies: u32,
    pub source: ConfigSource,
    pub identity: ProxyIdentity,
    pub listeners: Vec<ListenerInfo>,
    reload_lock: Mutex<()>,
}

impl Shared {
    pub fn new(
        snapshot: Snapshot,
        access_log: Option<AccessLog>,
        num_trusted_proxies: u32,
        source: ConfigSource,
        identity: ProxyIdentity,
        listeners: Vec<ListenerInfo>,
    ) -> Self {
        Shared {
            snapshot: ArcSwap::from_pointee(snapshot),
            metrics: Metrics::new(),
            access_log,
            num_trusted_proxies,
            source,
            identity,
            listeners,
            reload_lock: Mutex::new(()),
        }
    }

    /// Re-read the config and swap in a new snapshot; on error keep the running one.
    /// In-flight requests keep the snapshot they started with.
    pub fn reload(&self) -> Result<(), ConfigErrors> {
        let _serial = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let result = crate::config_source::load(&self.source).and_then(|loaded| {
            let previous = self.snapshot.load();
            Snapshot::build(loaded, &self.identity, Some(&previous))
        });
        match result {
            Ok(snapshot) => {
                let running: Vec<_> = self
                    .listeners
                    .iter()
                    .map(|l| (l.port_in_config, l.protocol))
                    .collect();
                let wanted: Vec<_> = snapshot
                    .listeners
                    .iter()
                    .map(|l| (l.port, l.protocol))
                    .collect();
                if running != wanted {
                    tracing::warn!(
                        ?running,
                        ?wanted,
                        "reloaded config changes Gateway ports; listeners only change on restart"
                    );
                }
                for w in &snapshot.warnings {
                    tracing::warn!("{w}");
                }
                self.snapshot.store(Arc::new(snapshot));
                self.metrics.config_reloads.inc();
                tracing::info!("config reloaded");
                Ok(())
            }
            Err(errors) => {
                self.metrics.config_reload_errors.inc();
                tracing::error!("config reload rejected, keeping the running config: {errors}");
                Err(errors)
            }
        }
    }
}

/// One worker thread's own resources.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub upstream: UpstreamClients,
}

/// One downstream connection.
pub struct ConnCtx {
    pub peer: SocketAddr,
    /// `peer.ip()` rendered once, for `x-forwarded-for`.
    pub peer_value: http::HeaderValue,
    pub local: SocketAddr,
    /// The listener's port as configured (port 0 in config stays 0 here).
    pub port: u16,
    framing_violation: Arc<AtomicBool>,
}

impl ConnCtx {
    pub fn new(
        peer: SocketAddr,
        local: SocketAddr,
        port: u16,
        framing_violation: Arc<AtomicBool>,
    ) -> Self {
        ConnCtx {
            peer,
            peer_value: crate::forwarding_headers::ip_header_value(peer.ip()),
            local,
            port,
            framing_violation,
        }
    }

    /// True once if the connection's first request head carried both Content-Length and
    /// Transfer-Encoding (which hyper would otherwise accept, dropping Content-Length).
    pub fn take_framing_violation(&self) -> bool {
        self.framing_violation.load(Ordering::Relaxed)
            && self.framing_violation.swap(false, Ordering::Relaxed)
    }
}
