//! Listeners, HTTP/TCP proxying, the request pipeline, upstream pools and the admin endpoint.
//!
//! In-process API: [`Proxy::start`] with [`ProxyOptions`] returns a [`RunningProxy`] that owns
//! its threads. The rooms follow a request: [`downstream`] accepts and frames it, [`pipeline`]
//! routes it and runs the policy filters, [`upstream`] sends it on, and [`control`] holds the
//! snapshot, reloads, admin and metrics around them. The request stages are listed in
//! [`pipeline`].

pub mod cli;
pub mod control;
pub mod downstream;
pub mod error;
pub mod options;
pub mod pipeline;
pub mod upstream;

pub use control::config_source::load as load_config;
pub use control::metrics::MetricsView;
pub use control::proxy::{Proxy, RunningProxy};
pub use control::snapshot::{ListenerProtocol, ProxyIdentity, Snapshot};
pub use control::state::ListenerInfo;
pub use downstream::client_addr::trusted_client_addr;
pub use downstream::timeouts::Timeouts;
pub use error::ProxyError;
pub use options::{AccessLogTarget, ConfigSource, ProxyOptions};
