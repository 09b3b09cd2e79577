//! Envoy RLS v3 rate limit service, a drop-in for envoyproxy/ratelimit: its config format
//! (with its validation messages), descriptor matching, memory and Redis stores using its keys,
//! gRPC (`ShouldRateLimit`, `grpc.health.v1`), HTTP (`/json`, `/healthcheck`), debug
//! (`/rlconfig`, `/metrics`) and its environment variables.
//!
//! Entry points for other crates:
//! - [`RateLimiter::in_memory`]`(ConfigSet)` then [`RateLimiter::decide`]`(&RateLimitRequest)
//!   -> Result<RateLimitResponse, RlsError>`: the embedded limiter, same code as the server.
//! - [`parse_config`]`(file_key, yaml) -> Result<RlsConfig, ConfigError>` and
//!   [`to_yaml`]`(&RlsConfig) -> String`: read/write the reference config format.
//! - [`Server::start`]`(Settings) -> Result<RunningServer, ServerError>` with
//!   [`Settings::loopback_for_tests`]; [`RunningServer`] has `grpc_addr()`, `http_addr()`,
//!   `debug_addr()`, `limiter()`, `shutdown()`.
//! - [`Settings::from_env`] parses the reference's environment variables (all errors at once).

#![forbid(unsafe_code)]

pub mod ban;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dynamic_metadata;
pub mod grpc_client;
pub mod grpc_frame;
pub mod heavy_hitters;
pub mod json;
pub mod lease;
pub mod limiter;
mod local_cache;
pub mod log_json;
pub mod matcher;
pub mod server;
mod serving_thread;
pub mod settings;
pub mod stats;
mod stats_key;
pub mod store;
mod wildcard;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{parse_config, to_yaml, ConfigError, ConfigSet, ConfigSource, RlsConfig};
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub use limiter::{LimiterSettings, RateLimiter, RlsError};
pub use server::{RunningServer, Server, ServerError};
pub use settings::{Backend, Settings};
