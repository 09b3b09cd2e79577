//! What every request reads, shared by all workers ([`Shared`]: the current snapshot, metrics,
//! the access log, the forwarding settings), and one worker's own upstream pools
//! ([`WorkerCtx`]).

use crate::core::access_log::AccessLog;
use crate::core::client_cert::Modes;
use crate::core::heavy_hitters::LimitedClients;
use crate::core::identity::ProxyIdentity;
use crate::core::metrics::Metrics;
use crate::filters::chain::ChainExtensions;
use crate::snapshot::Snapshot;
use crate::upstream::UpstreamClients;
use arc_swap::ArcSwap;
use std::sync::{Arc, OnceLock};

pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub metrics: Arc<Metrics>,
    pub access_log: Option<AccessLog>,
    pub num_trusted_proxies: u32,
    /// The XFCC modes of the gateway and a sidecar's inbound side
    /// (`runtime::gateway_topology`).
    pub client_cert: Modes,
    pub identity: ProxyIdentity,
    /// Filters added to every chain (kept for reloads).
    pub extensions: ChainExtensions,
    /// `--accel`'s handle for plain TCP relays that same-node apps may skip (set once at start).
    pub splicer: OnceLock<warden_accel::Splicer>,
    /// The clients each limiter answers 429 most (`/ratelimit/top`).
    pub limited: LimitedClients,
}

impl Shared {
    pub fn new(
        snapshot: Snapshot,
        access_log: Option<AccessLog>,
        num_trusted_proxies: u32,
        client_cert: Modes,
        identity: ProxyIdentity,
        extensions: ChainExtensions,
    ) -> Self {
        Shared {
            snapshot: ArcSwap::from_pointee(snapshot),
            metrics: Arc::new(Metrics::new()),
            access_log,
            num_trusted_proxies,
            client_cert,
            identity,
            extensions,
            splicer: OnceLock::new(),
            limited: LimitedClients::default(),
        }
    }
}

/// One worker thread's own resources.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub upstream: UpstreamClients,
}
