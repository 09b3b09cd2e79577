//! Envoy RLS v3 rate limit service: config (envoyproxy/ratelimit format), descriptor matching,
//! stores (memory, Redis), gRPC/HTTP servers, and the client the proxy uses.

pub mod cli;
pub mod clock;
pub mod config;
pub mod json;
pub mod limiter;
mod local_cache;
pub mod matcher;
pub mod server;
pub mod settings;
pub mod stats;
pub mod store;
mod wildcard;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{parse_config, to_yaml, ConfigError, ConfigSet, ConfigSource, RlsConfig};
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub use limiter::{LimiterSettings, RateLimiter, RlsError};
pub use server::{RunningServer, Server, ServerError};
pub use settings::{Backend, Settings};
