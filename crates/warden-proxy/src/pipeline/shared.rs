//! What every request reads, shared by all workers ([`Shared`]: the current snapshot, metrics,
//! the access log, the forwarding settings), and one worker's own upstream pools
//! ([`WorkerCtx`]).

use crate::core::access_log::AccessLog;
use crate::core::client_addr::TrustedCidrs;
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
    /// Trusted proxies named by address (the mesh config's `warden.xffTrustedCidrs`); when
    /// set, they decide the client address instead of `num_trusted_proxies` (which is 0).
    pub xff_trusted_cidrs: Option<TrustedCidrs>,
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
    /// The span queue and its exporter, when a tracing provider reports spans.
    pub tracer: Option<crate::core::trace_export::Tracer>,
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
            xff_trusted_cidrs: None,
            client_cert,
            identity,
            extensions,
            splicer: OnceLock::new(),
            limited: LimitedClients::default(),
            tracer: None,
        }
    }
}

impl Shared {
    /// Name the trusted proxies by address (`xff_trusted_cidrs`) instead of counting them.
    pub fn with_trusted_cidrs(mut self, cidrs: Option<TrustedCidrs>) -> Self {
        self.xff_trusted_cidrs = cidrs;
        self
    }

    /// Export sampled spans (started when a tracing provider is configured).
    pub fn with_tracer(mut self, tracer: Option<crate::core::trace_export::Tracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Whether the client address is read from `x-forwarded-for` at all (else it is the peer
    /// and the header is never looked up).
    pub fn reads_xff(&self) -> bool {
        self.num_trusted_proxies > 0 || self.xff_trusted_cidrs.is_some()
    }

    /// The trusted hops in front of a request from `peer`, for what else they decide (the
    /// request's `x-forwarded-proto` kept): `numTrustedProxies`, or 1 from a peer inside the
    /// trusted CIDRs.
    pub fn trusted_hops_from(&self, peer: std::net::IpAddr) -> u32 {
        match &self.xff_trusted_cidrs {
            Some(trusted) => u32::from(trusted.trusts(peer)),
            None => self.num_trusted_proxies,
        }
    }
}

/// One worker thread's own resources.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub upstream: UpstreamClients,
}
