//! Listeners, HTTP/TCP proxying, the request pipeline, upstream pools and the admin endpoint.
//!
//! In-process API: [`Proxy::start`] with [`ProxyOptions`] returns a [`RunningProxy`] that owns
//! its threads. The request stages are listed in [`pipeline`].

pub mod access_log;
pub mod admin;
pub mod body;
mod buffer_pool;
pub mod check;
pub mod cli;
pub mod client_addr;
pub mod cluster;
mod config_source;
pub mod error;
mod fast_h1;
pub mod filters;
pub mod forwarding_headers;
mod framing_guard;
pub mod h1_exchange;
pub mod h1_pool;
pub mod header_ops;
mod listen;
pub mod local_reply;
pub mod matcher;
pub mod metrics;
pub mod options;
pub mod pipeline;
pub mod proxy;
pub mod routing;
pub mod snapshot;
pub mod state;
mod tcp_proxy;
pub mod upstream;
mod worker;

pub use client_addr::trusted_client_addr;
pub use config_source::load as load_config;
pub use error::ProxyError;
pub use metrics::MetricsView;
pub use options::{AccessLogTarget, ConfigSource, ProxyOptions};
pub use proxy::{Proxy, RunningProxy};
pub use snapshot::{ListenerProtocol, ProxyIdentity, Snapshot};
pub use state::ListenerInfo;
