//! Listeners, HTTP/TCP proxying, the request pipeline, upstream pools and the admin endpoint.
//!
//! In-process API: [`Proxy::start`] with [`ProxyOptions`] returns a [`RunningProxy`] that owns
//! its threads. The layers follow a request, and each imports only the ones before it
//! (`tests/layer_order.rs` holds the order):
//! [`core`] (connection, request attributes, local replies, metrics) → [`upstream`] (clusters,
//! pools, exchanges, retries, TCP relay) → [`routing`] (route and port tables, matching) →
//! [`filters`] (the HTTP filter chain and its filters, L4 policies) → [`snapshot`] (the compiled
//! config) → [`pipeline`] (one request through the chain to its answer) → [`listeners`]
//! (accept, framing, TLS, sidecar capture) → [`runtime`] (workers, reloads, admin, check).

// libc calls without a safe wrapper (rlimit, madvise) allow it where they are.
#![deny(unsafe_code)]

pub mod cli;
pub mod core;
pub mod filters;
pub mod listeners;
pub mod pipeline;
pub mod routing;
pub mod runtime;
pub mod snapshot;
pub mod upstream;

pub use crate::core::client_addr::trusted_client_addr;
pub use crate::core::error::ProxyError;
pub use crate::core::identity::ProxyIdentity;
pub use crate::core::metrics::MetricsView;
pub use crate::core::timeouts::Timeouts;
pub use crate::routing::ports::ListenerProtocol;
pub use crate::runtime::config_source::load as load_config;
pub use crate::runtime::options::{AccessLogTarget, ConfigSource, ProxyOptions};
pub use crate::runtime::proxy::{Proxy, RunningProxy};
pub use crate::runtime::state::ListenerInfo;
pub use crate::snapshot::Snapshot;
